// The CPU reference (library arfusion_reference: the numerics contract on the host) as the
// project's tools use it to check outputs: arfusion-bench -c 1 (arfusion-stress, written only
// against the public header, has a reference of its own).
// Tools include this header, export/tool_api.h or include/arfusion/ only (scripts/check_layers.sh).
#pragma once

#include "reference/cpu_reference.h"
#include "reference/quant_reference.h"
