/* An allocation counter preloaded into ztrain by tests/dist/dist_layouts.py (LD_PRELOAD): an
 * independent measurement of the CPU backend's memory, which allocates every tensor with
 * aligned_alloc(64, bytes). It tracks the live bytes of those allocations and, at exit, writes
 * their peak to stderr as "count_alloc: rank R peak N bytes" (R from Open MPI's environment). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define SLOTS (1 << 16) /* open addressing; far more than the backend's live tensors */
static struct { void* p; size_t n; } table[SLOTS];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static size_t live, peak;
static void* (*real_aligned_alloc)(size_t, size_t);
static void (*real_free)(void*);

static size_t slot(void* p) { return ((uintptr_t)p >> 6) * 2654435761u % SLOTS; }

__attribute__((constructor)) static void init(void) {
  real_aligned_alloc = dlsym(RTLD_NEXT, "aligned_alloc");
  real_free = dlsym(RTLD_NEXT, "free");
}

void* aligned_alloc(size_t align, size_t n) {
  void* p = real_aligned_alloc(align, n);
  if (!p || align != 64) return p;
  pthread_mutex_lock(&mu);
  size_t i = slot(p);
  while (table[i].p) i = (i + 1) % SLOTS;
  table[i].p = p;
  table[i].n = n;
  live += n;
  if (live > peak) peak = live;
  pthread_mutex_unlock(&mu);
  return p;
}

void free(void* p) {
  if (p) {
    pthread_mutex_lock(&mu);
    for (size_t i = slot(p), k = 0; table[i].p && k < SLOTS; i = (i + 1) % SLOTS, ++k)
      if (table[i].p == p) {
        live -= table[i].n;
        /* backward-shift deletion keeps every probe chain unbroken */
        size_t j = i;
        for (;;) {
          j = (j + 1) % SLOTS;
          if (!table[j].p) break;
          size_t h = slot(table[j].p);
          if ((j > i && (h <= i || h > j)) || (j < i && (h <= i && h > j))) {
            table[i] = table[j];
            i = j;
          }
        }
        table[i].p = NULL;
        break;
      }
    pthread_mutex_unlock(&mu);
  }
  if (real_free) real_free(p);
}

__attribute__((destructor)) static void report(void) {
  const char* r = getenv("OMPI_COMM_WORLD_RANK");
  fprintf(stderr, "count_alloc: rank %s peak %zu bytes\n", r ? r : "0", peak);
}
