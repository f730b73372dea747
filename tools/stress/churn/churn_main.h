// Entry point of `arfusion-stress churn` (tools/stress/main.cc hands argv over when argv[1] is
// "churn"): the engine-like soak written only against include/arfusion/arfusion.h
// (tools/stress/README.md, section "churn: the engine-like soak").
#pragma once

namespace arf::churn {

// argv[0] is "churn". Returns the process exit code (options.h ChurnExit).
int churn_main(int argc, char** argv);

}  // namespace arf::churn
