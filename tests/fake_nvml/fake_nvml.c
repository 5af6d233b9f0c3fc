/* A stand-in for the NVIDIA driver's libnvidia-ml.so.1, built only for tests: the part of NVML's
 * C API that engine/backend/nvml.cpp loads with dlopen, laid out as NVML's nvml.h documents it.
 * Two GPUs; GPU 0 supports GPM (Hopper-like), GPU 1 does not (Ampere-like). GPM metric values are
 * derived from the two samples' sequence numbers, so a reader that compares the wrong samples, or
 * the same sample twice, gets different numbers than the test expects. */
#include <stdlib.h>
#include <string.h>

typedef struct { unsigned gpu, memory; } Utilization;
typedef struct { unsigned long long total, free, used; } Memory;
typedef struct { int device; int seq; } Sample; /* nvmlGpmSample_t points at one */
typedef struct { unsigned version, supported; } GpmSupport;
typedef struct {
  unsigned id;
  int status;
  double value;
  const char *short_name, *long_name, *unit;
} GpmMetric;
typedef struct {
  unsigned version, count;
  Sample *sample1, *sample2;
  GpmMetric metrics[98]; /* NVML_GPM_METRIC_MAX */
} GpmMetricsGet;

enum { OK = 0, INVALID_ARGUMENT = 2, NOT_SUPPORTED = 3, UNINITIALIZED = 1 };
static int initialized, gpm_seq[2];
static int devices[2] = {0, 1};

int nvmlInit_v2(void) { initialized = 1; return OK; }
int nvmlShutdown(void) { initialized = 0; return OK; }
int nvmlDeviceGetCount_v2(unsigned* n) { *n = 2; return initialized ? OK : UNINITIALIZED; }
int nvmlDeviceGetHandleByIndex_v2(unsigned i, void** d) {
  if (i > 1) return INVALID_ARGUMENT;
  *d = &devices[i];
  return OK;
}
static int index_of(void* d) { return *(int*)d; }
int nvmlDeviceGetHandleByPciBusId_v2(const char* bus, void** d) {
  if (strcmp(bus, "00000000:41:00.0") == 0) { *d = &devices[1]; return OK; }
  if (strcmp(bus, "00000000:01:00.0") == 0) { *d = &devices[0]; return OK; }
  return 6; /* NVML_ERROR_NOT_FOUND */
}
int nvmlDeviceGetUtilizationRates(void* d, Utilization* u) { u->gpu = 100; u->memory = 30 + index_of(d); return OK; }
int nvmlDeviceGetClockInfo(void* d, int type, unsigned* mhz) { (void)d; *mhz = type == 1 ? 1980 : 0; return OK; }
int nvmlDeviceGetMemoryInfo(void* d, Memory* m) { m->total = 80ull << 30; m->used = (1ull + index_of(d)) << 30; m->free = m->total - m->used; return OK; }
int nvmlDeviceGetPowerUsage(void* d, unsigned* mw) { (void)d; *mw = 650000; return OK; }
int nvmlDeviceGetTemperature(void* d, int sensor, unsigned* c) { (void)d; (void)sensor; *c = 61; return OK; }
int nvmlDeviceGetCurrentClocksEventReasons(void* d, unsigned long long* r) { *r = index_of(d) == 1 ? 0x40 : 0; return OK; }

int nvmlGpmQueryDeviceSupport(void* d, GpmSupport* s) {
  if (s->version != 1) return INVALID_ARGUMENT;
  s->supported = index_of(d) == 0;
  return OK;
}
int nvmlGpmSampleAlloc(void** s) { *s = calloc(1, sizeof(Sample)); return *s ? OK : INVALID_ARGUMENT; }
int nvmlGpmSampleFree(void* s) { free(s); return OK; }
int nvmlGpmSampleGet(void* d, void* s) {
  if (index_of(d) != 0) return NOT_SUPPORTED;
  Sample* x = (Sample*)s;
  x->device = 0, x->seq = ++gpm_seq[0];
  return OK;
}
/* SM activity 40% + 10% per sample between the two (the reader must pass the older one first);
 * occupancy 25%, tensor pipes 20%, DRAM 55%; any other metric: not supported */
int nvmlGpmMetricsGet(GpmMetricsGet* q) {
  if (q->version != 1 || q->count > 98 || !q->sample1 || !q->sample2 || q->sample1 == q->sample2) return INVALID_ARGUMENT;
  const int gap = q->sample2->seq - q->sample1->seq;
  if (gap <= 0) return INVALID_ARGUMENT;
  for (unsigned k = 0; k < q->count; ++k) {
    GpmMetric* m = &q->metrics[k];
    m->status = OK;
    switch (m->id) {
      case 2: m->value = 40.0 + 10.0 * (gap - 1); break;
      case 3: m->value = 25.0; break;
      case 5: m->value = 20.0; break;
      case 10: m->value = 55.0; break;
      default: m->status = NOT_SUPPORTED;
    }
  }
  return OK;
}
