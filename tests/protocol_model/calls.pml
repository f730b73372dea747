/* The call sequences protocol.pml is checked on, one per CONFIG_* macro (cmake/model_check.cmake
 * picks one per ctest entry, with N = 2 or 3). Each names, per call k (0-based):
 *   ALG(k)   LAM (oneshot_lamport), PULL (oneshot_pull) or TWO (twoshot);
 *   ROWS(k)  rows of the call (every rank the same: the call signature is checked on the host);
 *   GRID(k)  CTAs per rank, 1 <= GRID(k) <= ROWS(k) (the planner's grid = min(rows, cap), so every
 *            CTA owns a row; GMAX bounds it);
 *   NEXT_PULL(k) the first PULL call after k (CALLS if none): where a zero-copy rank's input of the
 *            next pull call may already be written;
 * and, per rank r, MATES(r) (bit m: rank m shares r's GPU, so r runs the shared-device gate before
 * every collective) and ZERO_COPY(r) (r's pull input IS its pull buffer, written by the caller in
 * stream order instead of the kernel's copy-in, as early as right after r's previous pull call).
 * Sequences alternate algorithms, row counts and grids so that consecutive calls of different
 * shapes meet in every buffer and flag word: a rank free-runs up to the point the protocol and
 * stream order stop it. */

#define LAM  1
#define PULL 2
#define TWO  3

#if defined(CONFIG_MIXED)
/* Lamport 2 rows on 2 CTAs -> pull 1 row on 1 CTA -> Lamport 3 rows on 1 CTA -> twoshot 2 rows on
 * 2 CTAs -> Lamport 1 row on 1 CTA: Lamport calls separated by barrier calls (the rotation only
 * advances on Lamport calls), CTA 1's epoch skipping calls, a zero-copy rank, and ranks 0 and 1
 * sharing a GPU (gated). */
#define CALLS 5
#define RMAX 3
#define GMAX 2
#define ALG(k)  ((k) == 1 -> PULL : ((k) == 3 -> TWO : LAM))
#define ROWS(k) ((k) == 0 || (k) == 3 -> 2 : ((k) == 2 -> 3 : 1))
#define GRID(k) ((k) == 0 || (k) == 3 -> 2 : 1)
#define NEXT_PULL(k) ((k) < 1 -> 1 : CALLS)
#define FIRST_PULL 1
#define MATES(r) ((r) == 0 -> 2 : ((r) == 1 -> 1 : 0))
#define ZERO_COPY(r) ((r) == 0)

#elif defined(CONFIG_LAMPORT)
/* Four Lamport calls, 2 -> 1 -> 1 -> 2 rows on 2 -> 1 -> 1 -> 2 CTAs: buffer 0 of call 0 is read
 * again at call 3, after call 1 cleared it by call 0's size (two rows). Clearing by the new call's
 * size (one row), or not at all, leaves call 0's data where call 3 reads; with two buffers a rank
 * one call ahead pushes into the buffer its peer is still to clear. */
#define CALLS 4
#define RMAX 2
#define GMAX 2
#define ALG(k)  LAM
#define ROWS(k) ((k) == 0 || (k) == 3 -> 2 : 1)
#define GRID(k) ((k) == 0 || (k) == 3 -> 2 : 1)
#define NEXT_PULL(k) CALLS
#define FIRST_PULL CALLS
#define MATES(r) 0
#define ZERO_COPY(r) 0

#elif defined(CONFIG_BARRIERS)
/* pull 2 rows on 2 CTAs -> pull 1 row on 1 CTA -> twoshot 2 rows on 2 CTAs -> twoshot 1 row on 1
 * CTA -> pull 2 rows on 2 CTAs: back-to-back pull calls (the end barrier is what keeps the second
 * copy-in off a buffer a peer still reads) and back-to-back twoshot calls (no end barrier: the
 * argument of twoshot.cuh), each pair with a shrinking grid, then a growing one. Rank 0 is
 * zero-copy. */
#define CALLS 5
#define RMAX 2
#define GMAX 2
#define ALG(k)  ((k) == 2 || (k) == 3 -> TWO : PULL)
#define ROWS(k) ((k) == 1 || (k) == 3 -> 1 : 2)
#define GRID(k) ((k) == 1 || (k) == 3 -> 1 : 2)
#define NEXT_PULL(k) ((k) < 1 -> 1 : ((k) < 4 -> 4 : CALLS))
#define FIRST_PULL 0
#define MATES(r) 0
#define ZERO_COPY(r) ((r) == 0)

#else
#error "define one of CONFIG_MIXED, CONFIG_LAMPORT, CONFIG_BARRIERS"
#endif

#if defined(ALL_GATED)
/* Every rank on one GPU: each runs the shared-device gate before every call. No rank then starts a
 * call before all of them finished the previous one, which hides MUTANT_TWO_BUFFERS (a rank one
 * call ahead is what it needs) but not MUTANT_NO_END_BARRIER with a zero-copy rank (the caller's
 * next write of the input follows the call at once, before the next gate). */
#undef MATES
#define MATES(r) (((1 << N) - 1) & ~(1 << (r)))
#endif
