// The library internals the project's own tools may use, and the only way they reach them:
// arfusion-bench (bench/) and the tools' shared host channel (tools/common/) include this header,
// export/reference_api.h or the public include/arfusion/ (arfusion-stress, tools/stress/, only the
// last) —
// nothing else under src/ (scripts/check_layers.sh enforces it in CI). Everything named here is
// already an internal interface of the library; this header adds no code. A tool that needs more
// adds it here, so the surface tools depend on stays one reviewed list.
#pragma once

// Status / Result: the error type the interfaces below return.
#include "base/status.h"
// Where this process sits under arfusion-run (ARF_RANK, ARF_WORLD_SIZE, ARF_DEVICE,
// ARF_RENDEZVOUS_ID): placement_from_env.
#include "core/env_placement.h"
// NCCL loaded at run time (the library's one loader): arfusion-bench's NCCL baseline column.
#include "core/nccl_api.h"
// The internal enums (DType, Pattern, Algorithm; equal to the public ones) and limits (kMaxRanks,
// kMaxHidden) the CPU reference and the tools' buffers are sized by.
#include "common/kernel_params.h"
// arfusion-bench --tune-out: the tuning table's schema, validation and writer.
#include "policy/tuning_table.h"
// The tools' host channel between rank processes (tools/common/process_group.h): the ipc
// transport's bootstrap (sockets, all_gather, barrier, vote) under an id derived from the job's.
#include "transport/ipc_bootstrap.h"
