// Entry point of `arfusion-stress churn` (tools/stress/main.cc hands argv over when argv[1] is
// "churn"): the engine-like soak written only against include/arfusion/arfusion.h
// (tools/stress/README.md, section "churn: the engine-like soak").
#pragma once

namespace arf::churn {

// argv[0] is "churn". Returns the process exit code (options.h ChurnExit).
// library_variant: the library build linked in (tools/stress/main.cc's ARF_STRESS_VARIANT: "release"
// or a negative control), recorded in the JSON.
int churn_main(int argc, char** argv, const char* library_variant);

}  // namespace arf::churn
