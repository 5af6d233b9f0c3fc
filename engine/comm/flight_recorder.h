// The flight recorder (docs/observability.md, "Flight recorder"): every rank keeps its last N
// collectives (per-group sequence number, group, op, bytes, when issued, when its wait ended) in
// a ring, and writes them to out_dir/flight_rank_NNNNN.json
//   - when a collective times out on this rank, or another rank asks (see below);
//   - on SIGUSR2 (the job goes on: a look inside a run that seems stuck);
//   - on a fatal signal (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT), best effort.
// When a collective times out, the rank asks every other rank, on a communicator of its own (a
// duplicate of the world), where it is: a rank that is waiting in any collective polls for the
// question and answers with its sequence numbers. The timeout message then names the ranks (and
// hosts) of the stuck group that never entered the collective: those whose sequence number for
// the group is behind, or that did not answer at all (a rank inside a collective answers, so one
// that does not is stopped, wedged outside communication, or gone).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "engine/comm/comm.h"
#include "engine/comm/topology.h"

namespace zt {

class FlightRecorder;

// SIGUSR2 never ends a run: with a recorder it writes the recorder's file, without one (a single
// process, or [comm] flight_entries = 0) it prints a line saying there is none. Installed by
// `ztrain train` at start-up, before anything else, and again by each recorder.
void install_usr2_handler();

// The process's recorder, or null (single process, or [comm] flight_entries = 0).
FlightRecorder* flight_recorder();

// Asks its questions on the topology's side communicator and names hosts from its list (no
// collective here). Installs the SIGUSR2 and fatal-signal handlers. One per process; the last
// one made is used. (Shared: the type is complete only in flight_recorder.cpp.)
std::shared_ptr<FlightRecorder> make_flight_recorder(const Topology& topo, const std::string& out_dir, size_t entries);

// Installed as the communicators' hooks (comm.h, CommHooks) by the recorder:
// flight_poll answers the other ranks' questions (cheap: one MPI_Iprobe; nothing without a
// recorder); flight_on_timeout, for a collective on `group` (a communicator's name: "dp(mpi)",
// "tp(nccl)") that timed out on this rank, writes this rank's file, asks the others, and returns
// the diagnosis for the timeout message.
void flight_poll();
std::string flight_on_timeout(const std::string& group);

// `inner` (group "world", "tp" or "dp") with every collective recorded.
std::unique_ptr<Comm> make_flight_recorded_comm(std::unique_ptr<Comm> inner, const char* group, FlightRecorder& rec);

// The step the collectives issued from here on belong to (the files show it).
void flight_set_step(int64_t step);

}  // namespace zt
