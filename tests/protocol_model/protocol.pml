/* The synchronization protocol of arfusion's collective kernels as they execute it, for Spin
 * (docs/protocol.md, "Model checking": the abstraction, how to run it, what each mutant shows).
 *
 * Modelled:
 *  - N ranks (2 or 3), each a stream of kernels: per call the shared-device gate kernel (ranks with
 *    device mates; launch.cu) and then the collective kernel of GRID(k) CTAs. Every CTA slot of a
 *    rank is a process; a kernel starts once the rank's previous kernel completed (stream order;
 *    PDL's griddepcontrol.wait gives the same) and completes when its last CTA exits (call_exit).
 *    Nothing else orders the ranks: any rank may run ahead as far as the protocol lets it.
 *  - Per rank, the ControlBlock fields the protocol reads (kernel_params.h): lamport_buffer,
 *    lamport_clear_elems (in rows), call_index, exit_arrivals, cta_epoch[], gate_epoch; the flag
 *    words flags[dst][CTA or gate row][src] = {epoch, call} (flag_word); the Lamport slot headers
 *    of verify_calls; the peer-visible buffers: Lamport [buffer][src][row], pull [row], scatter
 *    inbox [src][row] (the owner's part of each row), gather inbox [row][part].
 *  - The kernels' actions in their order: oneshot_lamport.cuh (header, push, clear of the previous
 *    buffer by its recorded size, spread over the grid, poll, header check, rotation at exit),
 *    oneshot_pull.cuh (copy-in or a zero-copy input, start barrier, pull, end barrier, epoch
 *    write-back), twoshot.cuh (scatter, barrier, reduce and push to every gather inbox, barrier,
 *    read), protocol.cuh (peer_barrier, shared_device_gate, enter, call_exit).
 *  - Constants and rules from the code: protocol_constants.h, written by constants.cmake from
 *    model_constants.cc (the C++ functions' values) and the kernels' call sites.
 * Data: a row is one cell holding the index + 1 of the call that wrote it (0: never written, or the
 * -0.0 sentinel of a Lamport slot; data is canonicalised, never -0.0). The rank and row a cell
 * belongs to are fixed by where it is (the index rules are tested in
 * tests/cpu/test_protocol_index.cc), so a read that checks the call checks the value, and a sum
 * whose every term is this call's is this call's sum. A row's vectors are independent cells that
 * behave alike, so one stands for all.
 *
 * Properties (assertions; Spin reports a deadlock as an invalid end state):
 *  - a read gets this call's data, never another call's, an unwritten cell or a sentinel;
 *  - a write never replaces a value a reader still needs (the ghost arrays g_*: readers pending),
 *    and a push lands only in a cleared Lamport slot;
 *  - every reduced value is the sum of the ranks' inputs of its call;
 *  - verify_calls' integrity checks (barrier_call_consistent, the slot headers) never fire;
 *  - every call of every rank completes: no deadlock (safety run); with BUSY_WAIT, the waits are
 *    spin loops and ltl all_done holds under weak fairness (pan -a -f).
 *
 * Mutants, -D switches, each of which must yield a counterexample (cmake/model_check.cmake):
 *  MUTANT_NO_END_BARRIER    oneshot_pull without its end barrier;
 *  MUTANT_TWO_BUFFERS       two Lamport buffers instead of three;
 *  MUTANT_NO_CLEAR          no clear of the previous Lamport buffer;
 *  MUTANT_CLEAR_NEW         the clear sized by the new call instead of the call that wrote the buffer;
 *  MUTANT_FLAG_FIRST        every barrier flag published before the payload it guards (what a
 *                           relaxed flag store allows: no release orders them any more);
 *  MUTANT_NO_GATHER_BARRIER twoshot without the barrier between reduce and read.
 */

#include "protocol_constants.h"
#include "calls.pml"

#ifndef N
#define N 2
#endif

/* ---- constants the model takes from the code, or a mutant replaces ------------------------------ */

#if defined(MUTANT_TWO_BUFFERS)
#define LB 2
#define NEXT_BUF(b) (((b) + 1) % 2)
#define CLEAR_BUF(b) (((b) + 1) % 2)
#else
#define LB LAMPORT_BUFFERS
#define NEXT_BUF(b) LAMPORT_NEXT_BUFFER(b)
#define CLEAR_BUF(b) LAMPORT_CLEAR_BUFFER(b)
#endif

#define SENTINEL 0   /* -0.0 in a Lamport slot; "never written" elsewhere */
#define POISON 255   /* a reduction over a term of another call */
#define TAG(k) ((k) + 1)     /* a trail prints a cell as "data of call TAG - 1": -1 is SENTINEL */
#define GATE_ROW GMAX
#define GATED(r) (MATES(r) != 0)
#define IS_MATE(r, m) (((MATES(r) >> (m)) & 1) != 0)

/* ---- state ------------------------------------------------------------------------------------- */

/* ControlBlock, per rank */
byte lamport_buffer[N];
byte clear_rows[N * LB];        /* lamport_clear_elems, in rows */
byte call_index[N];
byte exit_arrivals[N];
byte cta_epoch[N * GMAX];
byte gate_epoch[N];

/* flag words {epoch, call} of rank dst, written by rank src: [dst][cta | GATE_ROW][src] */
#define FI(dst, row, src) (((dst) * (GMAX + 1) + (row)) * N + (src))
byte flag_epoch[N * (GMAX + 1) * N];
byte flag_call[N * (GMAX + 1) * N];

/* verify_calls: Lamport slot header of rank dst, [dst][buffer][cta][src] */
#define HI(dst, b, cta, src) ((((dst) * LB + (b)) * GMAX + (cta)) * N + (src))
byte header[N * LB * GMAX * N];

/* peer-visible buffers */
#define LI(dst, b, src, row) ((((dst) * LB + (b)) * N + (src)) * RMAX + (row))
byte lamport[N * LB * N * RMAX];
#define PI(r, row) ((r) * RMAX + (row))
byte pull[N * RMAX];
#define SI(owner, src, row) (((owner) * N + (src)) * RMAX + (row))
byte scatter[N * N * RMAX];
#define GI(r, row, part) (((r) * RMAX + (row)) * N + (part))
byte gather[N * RMAX * N];

/* ghosts: readers that still need the cell's current value */
bit g_lamport_unread[N * LB * N * RMAX];
byte g_pull_readers[N * RMAX];
bit g_scatter_unread[N * N * RMAX];
bit g_gather_unread[N * RMAX * N];

/* scratch of single (d_)steps only: never live across a step, so not part of the state */
hidden byte h_s, h_j, h_i, h_n;

#define ALL_DONE_2 (call_index[0] == CALLS && call_index[1] == CALLS)
#if N == 2
#define ALL_DONE ALL_DONE_2
#elif N == 3
#define ALL_DONE (ALL_DONE_2 && call_index[2] == CALLS)
#else
#error "N is 2 or 3"
#endif

#if defined(BUSY_WAIT)
/* A spin loop: the condition is polled until it holds (spin_until without the clock). */
#define AWAIT(cond, then) do :: atomic { (cond) -> then; break } :: else -> skip od
ltl all_done { <> (ALL_DONE) }
#else
/* The same wait as a guard: enabled exactly when the loop would leave, which is equivalent under
 * weak fairness because every awaited condition, once true, stays true until the waiter acts. */
#define AWAIT(cond, then) atomic { (cond) -> then }
#endif

/* ---- steps --------------------------------------------------------------------------------------
 * A step is one atomic transition of the model. Each wait and each access a peer can observe is a
 * step of its own, with two kinds of merging:
 *  - exact (Lipton's reduction: the merged action commutes with everything that can run beside
 *    it): the kernel's start and protocol::enter (reads of the rank's own control block, which
 *    nothing writes while its kernel runs) join the first action after them; a barrier's release
 *    stores (read only by the waiter, which cannot have passed yet) and the Lamport slot header
 *    (read only after the data it precedes) join the action before them; store_cta_epoch,
 *    call_exit and the gate's epoch store (read only by the rank's next kernel, not started yet)
 *    and the final header check (of words nobody writes then) join the last wait;
 *  - a row's accesses of one phase are one step (its stores to every peer, its loads from every
 *    source, the twoshot owner's loads of a part and the pushes of their sum): another process
 *    could only tell them apart by writing or reading one of those cells in between, and every
 *    such write is checked against pending readers (g_*) and every read against its call, so the
 *    merged model still fails on every race that the split one would. */

#define LAST_PEER(r) ((r) == N - 1 -> N - 2 : N - 1)
#define LAST_MATE(r) ((MATES(r) >> 2) & 1 -> 2 : ((MATES(r) >> 1) & 1 -> 1 : 0))
#define LAST_ROW (i + GRID(k) >= ROWS(k))
#define STARTED (call_index[r] == k && (!GATED(r) || gate_epoch[r] == k + 1))

/* ---- the peer barrier and the gate (protocol.cuh) -------------------------------------------- */

/* peer_barrier: thread i < N signals peer i with one release store of {epoch, call} (the stores of
 * all threads follow the CTA's __syncthreads(), so they publish everything the CTA wrote) ... */
inline signal(row, epoch) {
  printf("r%d cta%d call%d: signal epoch %d\n", r, row, k, epoch);
  for (h_s : 0 .. N - 1) {
    if
    :: h_s != r -> flag_epoch[FI(h_s, row, r)] = epoch; flag_call[FI(h_s, row, r)] = k
    :: else
    fi
  }
  h_s = 0
}

/* ... and waits, with acquire loads, until peer i's flag for it reaches the epoch; the integrity
 * rule of verify_calls must hold for the word the wait ended on. TAIL runs with the last wait. */
#define BARRIER_WAIT(row, epoch, TAIL) \
  s = 0; \
  do \
  :: s == N -> break \
  :: s == r -> s++ \
  :: s < N && s != r -> \
     AWAIT(EPOCH_REACHED(flag_epoch[FI(r, row, s)], epoch), \
           printf("r%d cta%d call%d: r%d's flag reached epoch %d\n", r, row, k, s, epoch); \
           assert(BARRIER_CALL_CONSISTENT(flag_epoch[FI(r, row, s)] - (epoch), \
                                          flag_call[FI(r, row, s)] - k)); \
           if :: s == LAST_PEER(r) -> TAIL :: else fi); \
     s++ \
  od; \
  s = 0

/* shared_device_gate: the gate row of the flag words, this rank's gate epoch + GATE_STEP, every
 * device mate; the kernel's last act is the gate epoch's write-back. */
inline gate() {
  atomic {
    call_index[r] == k -> e = gate_epoch[r] + GATE_STEP;
    printf("r%d gate call%d: signal gate epoch %d\n", r, k, e);
    for (h_s : 0 .. N - 1) {
      if
      :: IS_MATE(r, h_s) -> flag_epoch[FI(h_s, GATE_ROW, r)] = e; flag_call[FI(h_s, GATE_ROW, r)] = k
      :: else
      fi
    }
    h_s = 0
  }
  s = 0;
  do
  :: s == N -> break
  :: s < N && !IS_MATE(r, s) -> s++
  :: s < N && IS_MATE(r, s) ->
     AWAIT(EPOCH_REACHED(flag_epoch[FI(r, GATE_ROW, s)], e),
           assert(BARRIER_CALL_CONSISTENT(flag_epoch[FI(r, GATE_ROW, s)] - e,
                                          flag_call[FI(r, GATE_ROW, s)] - k));
           printf("r%d gate call%d: r%d reached gate epoch %d\n", r, k, s, e);
           if :: s == LAST_MATE(r) -> gate_epoch[r] = e; e = 0 :: else fi);
     s++
  od;
  s = 0
}

/* ---- kernel exit (protocol.cuh store_cta_epoch, call_exit) ------------------------------------ */

/* A zero-copy rank's input of pull call `call`: all rows, written in stream order before the call. */
inline zero_copy_write(call) {
  if
  :: call < CALLS ->
     printf("r%d: the caller writes the input of pull call %d\n", r, call);
     for (h_i : 0 .. RMAX - 1) {
       if
       :: h_i < ROWS(call) ->
          assert(g_pull_readers[PI(r, h_i)] == 0);   /* every rank read the previous call's */
          pull[PI(r, h_i)] = TAG(call); g_pull_readers[PI(r, h_i)] = N
       :: else
       fi
     }
     h_i = 0
  :: else
  fi
}

/* The last CTA to arrive records the Lamport call's size for its buffer, rotates and advances the
 * call index; the kernel has then completed, and a zero-copy rank's caller may write its next
 * pull input (stream-ordered after this kernel). */
inline finish() {
  if
  :: ALG(k) == PULL -> cta_epoch[r * GMAX + b] = e + PULL_EPOCH_ADVANCE
  :: ALG(k) == TWO -> cta_epoch[r * GMAX + b] = e + TWOSHOT_EPOCH_ADVANCE
  :: else
  fi;
  exit_arrivals[r]++;
  printf("r%d cta%d call%d: exit\n", r, b, k);
  if
  :: exit_arrivals[r] == GRID(k) ->
     printf("r%d: call %d complete\n", r, k);
     exit_arrivals[r] = 0;
     if
     :: ALG(k) == LAM -> clear_rows[r * LB + e] = ROWS(k); lamport_buffer[r] = NEXT_BUF(e)
     :: else
     fi;
     if
     :: ALG(k) == PULL && ZERO_COPY(r) -> zero_copy_write(NEXT_PULL(k))
     :: else
     fi;
     call_index[r] = k + 1
  :: else
  fi;
  e = 0; clear = 0
}

/* ---- oneshot_lamport ----------------------------------------------------------------------------- */

inline lamport_cta() {
  atomic {
    STARTED ->
    e = lamport_buffer[r];
#if defined(MUTANT_CLEAR_NEW)
    clear = ROWS(k);
#else
    clear = clear_rows[r * LB + CLEAR_BUF(e)];
#endif
    printf("r%d cta%d call%d: Lamport start: reads buffer %d, clears %d rows of buffer %d\n",
           r, b, k, e, clear, CLEAR_BUF(e));
    /* lamport_publish_header (verify_calls): this call's index, before any push of this CTA */
    for (h_s : 0 .. N - 1) {
      if :: h_s != r -> header[HI(h_s, e, b, r)] = TAG(k) :: else fi
    }
    h_s = 0
  }
  /* lamport_push_rows: rows b, b + G, ... into slot[r] of buffer e of every peer (canonicalised:
   * never the sentinel); the stores of a row to the peers are independent, so one step. */
  i = b;
  do
  :: i < ROWS(k) ->
     d_step {
       printf("r%d cta%d call%d: push row %d into buffer %d of every peer\n", r, b, k, i, e);
       for (h_s : 0 .. N - 1) {
         if
         :: h_s != r ->
            assert(lamport[LI(h_s, e, r, i)] == SENTINEL);   /* cleared since its last use */
            lamport[LI(h_s, e, r, i)] = TAG(k); g_lamport_unread[LI(h_s, e, r, i)] = 1
         :: else
         fi
       }
       h_s = 0
     }
     i = i + GRID(k)
  :: else -> break
  od;
  i = 0;
  /* lamport_clear_previous: the first `clear` rows of every peer slot of buffer CLEAR_BUF(e);
   * element n of the flattened (slot, row) range belongs to CTA n % grid. */
#if !defined(MUTANT_NO_CLEAR)
  d_step {
    printf("r%d cta%d call%d: clear its share of %d rows of buffer %d\n", r, b, k, clear, CLEAR_BUF(e));
    h_n = 0;
    for (h_s : 0 .. N - 1) {
      if
      :: h_s != r ->
         for (h_j : 0 .. RMAX - 1) {
           if
           :: h_j < clear ->
              if
              :: h_n % GRID(k) == b ->
                 assert(!g_lamport_unread[LI(r, CLEAR_BUF(e), h_s, h_j)]);   /* read already */
                 lamport[LI(r, CLEAR_BUF(e), h_s, h_j)] = SENTINEL
              :: else
              fi;
              h_n++
           :: else
           fi
         }
      :: else
      fi
    }
    h_s = 0; h_j = 0; h_n = 0
  }
#endif
  /* lamport_reduce_vec: each row, each source in rank order, until its slot holds no sentinel; the
   * sum needs every term to be this call's. The last read ends with lamport_check_headers
   * (verify_calls: every source's header of this CTA is this call's) and the exit. */
  i = b;
  do
  :: i < ROWS(k) ->
     s = 0;
     do
     :: s == N -> break
     :: s == r -> s++
     :: s < N && s != r ->
        AWAIT(lamport[LI(r, e, s, i)] != SENTINEL,
              printf("r%d cta%d call%d: read row %d of r%d in buffer %d: data of call %d\n",
                     r, b, k, i, s, e, lamport[LI(r, e, s, i)] - 1);
              assert(lamport[LI(r, e, s, i)] == TAG(k)); g_lamport_unread[LI(r, e, s, i)] = 0;
              if
              :: LAST_ROW && s == LAST_PEER(r) ->
                 for (h_s : 0 .. N - 1) {
                   if :: h_s != r -> assert(header[HI(r, e, b, h_s)] == TAG(k)) :: else fi
                 }
                 h_s = 0;
                 finish()
              :: else
              fi);
        s++
     od;
     s = 0;
     i = i + GRID(k)
  :: else -> break
  od;
  i = 0
}

/* ---- oneshot_pull ------------------------------------------------------------------------------- */

inline copy_in_row() {
  printf("r%d cta%d call%d: copy-in row %d\n", r, b, k, i);
  assert(g_pull_readers[PI(r, i)] == 0);   /* every rank read the previous call's row */
  pull[PI(r, i)] = TAG(k); g_pull_readers[PI(r, i)] = N
}

inline pull_cta() {
  /* kernel start, copy-in (pull_copy_in_rows; a zero-copy rank has none) and the start barrier's
   * signal after the last row */
  atomic {
    STARTED -> e = cta_epoch[r * GMAX + b]; i = b;
    printf("r%d cta%d call%d: pull start, epoch %d\n", r, b, k, e);
#if defined(MUTANT_FLAG_FIRST)
    signal(b, e + PULL_START_STEP)
#else
    if
    :: ZERO_COPY(r) -> signal(b, e + PULL_START_STEP)
    :: else -> copy_in_row(); if :: LAST_ROW -> signal(b, e + PULL_START_STEP) :: else fi
    fi
#endif
  }
#if defined(MUTANT_FLAG_FIRST)
  if
  :: !ZERO_COPY(r) ->
     do
     :: i < ROWS(k) -> d_step { copy_in_row() }; i = i + GRID(k)
     :: else -> break
     od
  :: else
  fi;
#else
  if
  :: !ZERO_COPY(r) ->
     i = i + GRID(k);
     do
     :: i < ROWS(k) -> d_step { copy_in_row(); if :: LAST_ROW -> signal(b, e + PULL_START_STEP) :: else fi };
        i = i + GRID(k)
     :: else -> break
     od
  :: else
  fi;
#endif
  BARRIER_WAIT(b, e + PULL_START_STEP, skip);
  /* pull_reduce_vec: rows b, b + G, ... from every rank's pull buffer, own included (one step a
   * row: the loads of all sources are issued together); the end barrier's signal follows the last */
  i = b;
  do
  :: i < ROWS(k) ->
     d_step {
       for (h_s : 0 .. N - 1) {
         printf("r%d cta%d call%d: read row %d of r%d's pull buffer: data of call %d\n",
                r, b, k, i, h_s, pull[PI(h_s, i)] - 1);
         assert(pull[PI(h_s, i)] == TAG(k));
         g_pull_readers[PI(h_s, i)] = g_pull_readers[PI(h_s, i)] - 1
       }
       h_s = 0;
       if
       :: LAST_ROW ->
#if defined(MUTANT_NO_END_BARRIER)
          finish()
#else
          signal(b, e + PULL_END_STEP)
#endif
       :: else
       fi
     }
     i = i + GRID(k)
  :: else -> break
  od;
  i = 0;
#if !defined(MUTANT_NO_END_BARRIER)
  BARRIER_WAIT(b, e + PULL_END_STEP, finish())
#endif
}

/* ---- twoshot ------------------------------------------------------------------------------------- */

/* twoshot_scatter_rows: part p of row i to owner p's inbox, slot [r] */
inline scatter_row() {
  printf("r%d cta%d call%d: scatter row %d\n", r, b, k, i);
  for (h_s : 0 .. N - 1) {
    assert(!g_scatter_unread[SI(h_s, r, i)]);   /* the owner reduced the previous call's */
    scatter[SI(h_s, r, i)] = TAG(k); g_scatter_unread[SI(h_s, r, i)] = 1
  }
  h_s = 0
}

inline twoshot_cta() {
  atomic {
    STARTED -> e = cta_epoch[r * GMAX + b]; i = b;
    printf("r%d cta%d call%d: twoshot start, epoch %d\n", r, b, k, e);
#if defined(MUTANT_FLAG_FIRST)
    signal(b, e + TWOSHOT_SCATTER_STEP)
#else
    scatter_row(); if :: LAST_ROW -> signal(b, e + TWOSHOT_SCATTER_STEP) :: else fi
#endif
  }
#if defined(MUTANT_FLAG_FIRST)
  do
  :: i < ROWS(k) -> d_step { scatter_row() }; i = i + GRID(k)
  :: else -> break
  od;
#else
  i = i + GRID(k);
  do
  :: i < ROWS(k) ->
     d_step { scatter_row(); if :: LAST_ROW -> signal(b, e + TWOSHOT_SCATTER_STEP) :: else fi };
     i = i + GRID(k)
  :: else -> break
  od;
#endif
  BARRIER_WAIT(b, e + TWOSHOT_SCATTER_STEP, skip);
  /* twoshot_reduce_rows: part r of rows b, b + G, ... over every source's slot, the rounded sum
   * pushed to every rank's gather inbox; the gather barrier's signal follows the last push. */
#if defined(MUTANT_FLAG_FIRST)
  d_step { signal(b, e + TWOSHOT_GATHER_STEP) };
#endif
  i = b;
  do
  :: i < ROWS(k) ->
     d_step {
       sum = TAG(k);
       for (h_s : 0 .. N - 1) {
         printf("r%d cta%d call%d: reduce part %d of row %d from r%d: data of call %d\n",
                r, b, k, r, i, h_s, scatter[SI(r, h_s, i)] - 1);
         assert(scatter[SI(r, h_s, i)] == TAG(k));
         if :: scatter[SI(r, h_s, i)] != TAG(k) -> sum = POISON :: else fi;
         g_scatter_unread[SI(r, h_s, i)] = 0
       }
       for (h_s : 0 .. N - 1) {
         assert(!g_gather_unread[GI(h_s, i, r)]);   /* that rank read the previous call's */
         gather[GI(h_s, i, r)] = sum; g_gather_unread[GI(h_s, i, r)] = 1
       }
       h_s = 0; sum = 0;
#if !defined(MUTANT_FLAG_FIRST) && !defined(MUTANT_NO_GATHER_BARRIER)
       if :: LAST_ROW -> signal(b, e + TWOSHOT_GATHER_STEP) :: else fi
#endif
     }
     i = i + GRID(k)
  :: else -> break
  od;
#if !defined(MUTANT_NO_GATHER_BARRIER)
  BARRIER_WAIT(b, e + TWOSHOT_GATHER_STEP, skip);
#endif
  /* the epilogue reads our own gather inbox: every part of rows b, b + G, ... is this call's sum;
   * the exit follows the last row */
  i = b;
  do
  :: i < ROWS(k) ->
     d_step {
       for (h_s : 0 .. N - 1) {
         printf("r%d cta%d call%d: read part %d of row %d from its gather inbox: sum of call %d\n",
                r, b, k, h_s, i, gather[GI(r, i, h_s)] - 1);
         assert(gather[GI(r, i, h_s)] == TAG(k));
         g_gather_unread[GI(r, i, h_s)] = 0
       }
       h_s = 0;
       if :: LAST_ROW -> finish() :: else fi
     }
     i = i + GRID(k)
  :: else -> break
  od;
  i = 0
}

/* ---- one CTA slot of one rank, over every call ---------------------------------------------- */

proctype Cta(byte r; byte b) {
  byte k;        /* the call */
  byte e;        /* from entry: the Lamport buffer (LAM) or the CTA's epoch (PULL, TWO); the gate epoch */
  byte clear;    /* from entry (LAM): rows to clear in the previous buffer */
  byte i, s;     /* row, source */
  byte sum;
  do
  :: k == CALLS -> break
  :: else ->
     if
     :: GATED(r) && b == 0 -> gate()   /* the gate kernel: after the last collective, before this */
     :: else
     fi;
     if
     :: b < GRID(k) && ALG(k) == LAM -> lamport_cta()
     :: b < GRID(k) && ALG(k) == PULL -> pull_cta()
     :: b < GRID(k) && ALG(k) == TWO -> twoshot_cta()
     :: else   /* no CTA b in this call's grid */
     fi;
     k++
  od
}

init {
  byte r;
  /* the call sequence is one the planner can produce: every CTA owns a row (grid = min(rows, cap)) */
  d_step {
    for (h_i : 0 .. CALLS - 1) {
      assert(ALG(h_i) == LAM || ALG(h_i) == PULL || ALG(h_i) == TWO);
      assert(1 <= GRID(h_i) && GRID(h_i) <= ROWS(h_i) && ROWS(h_i) <= RMAX && GRID(h_i) <= GMAX)
    }
    h_i = 0
  }
  atomic {
    for (r : 0 .. N - 1) {
      if :: ZERO_COPY(r) -> zero_copy_write(FIRST_PULL) :: else fi;
      for (h_j : 0 .. GMAX - 1) { run Cta(r, h_j) }
    }
    r = 0; h_j = 0
  }
}
