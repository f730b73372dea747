#!/usr/bin/env bash
# A clean copy of a commit for the GPU machine to build itself (16 cores there: the full build with
# the negative-control variants takes ~2.5 min), when the working tree holds uncommitted work that
# must not travel: writes .snap/ (git-excluded) from HEAD or the named commit, with COMMIT holding
# its hash (gpu_acceptance.sh stamps results with it: the device copy's own git HEAD can be stale).
#   bash dev/remote_gpu/snapshot_for_device.sh [COMMIT]
# Then copy .snap to the GPU host with the tree and run there:
#   cd .snap && bash dev/remote_gpu/gpu_acceptance.sh build python e2e ctest
set -euo pipefail
cd "$(dirname "$0")/../.."
# git's exclude file (in a worktree .git is a file, so ask git where it is)
exclude=$(git rev-parse --git-path info/exclude)
commit=$(git rev-parse --short "${1:-HEAD}")
grep -qx '/.snap/' "$exclude" 2>/dev/null || echo '/.snap/' >> "$exclude"
rm -rf .snap && mkdir .snap
git archive "$commit" | tar -x -C .snap
echo "$commit" > .snap/COMMIT
echo "snapshot of $commit in .snap ($(du -sh .snap | cut -f1))"
