// The process side of arfusion-run: forks one process per rank, relays their output, forwards
// signals, stops every rank when one fails or the time limit passes, and never leaves a rank
// behind. Single-threaded (one poll loop), so fork + setenv in the child are safe.
//
// Each rank r runs args.command (PATH searched) in its own process group with stdin /dev/null
// (a background process group reading a terminal would be stopped by SIGTTIN) and
//   ARF_RANK=r  ARF_LOCAL_RANK=r  ARF_WORLD_SIZE=N  ARF_DEVICE=args.devices[r]
//   ARF_RENDEZVOUS_ID=args.rendezvous_id
//   CUDA_DEVICE_MAX_CONNECTIONS=32, NCCL_NVLS_ENABLE=0   (each only when not already set)
// Its stdout/stderr reach the launcher's stdout/stderr line by line (output.h).
//
// Lifetime rules:
// - A rank is its process group: when the rank's process exits, whatever it left running in its
//   group is SIGKILLed (it would otherwise hold the output pipes open), and every signal the
//   launcher sends goes to the whole group.
// - SIGINT/SIGTERM/SIGHUP to the launcher are forwarded once to every running rank; a second one
//   sends SIGKILL. The ranks' statuses then decide the exit status as usual (verdict.h).
// - The first rank to fail (exit not 0/77, or a signal) makes the launcher SIGTERM the others,
//   then SIGKILL whatever still runs after grace_seconds. --timeout does the same to all.
// - Ranks get PR_SET_PDEATHSIG=SIGKILL, so they die with the launcher even if it is SIGKILLed.
#pragma once

#include "args.h"

namespace arf::run {

// Runs the job to completion; returns the exit status of verdict.h, after printing its message
// (one line on stderr) when there is one. kExitLauncherError if the launcher itself fails.
int run_job(const RunArgs& args);

}  // namespace arf::run
