/*
 * sessions.pml: sessions of docs/contract.md §14, every owner in order,
 * as a Promela model for Spin. Read it beside §14: each step names the
 * rule it models in brackets ([A1] ... [A5], [S1] ... [S6], [Death],
 * [Resume]). The package doc (doc.go) says how to run it.
 *
 * Who: one agent; owners by epoch (owner k serves socket k and owns the
 * session at epoch k+1, on instance k mod 2); one contender (another
 * holder acquiring through the backend, as a REST caller); a backend that
 * decides each write at once and whose answer reaches the owner any time
 * later (past the lease TTL included); NL leases; NS sockets, so epochs up
 * to NS.
 *
 * Time is discrete and relative: a tick (clock, below) counts down every
 * timer of the model, each saturating at 0, so the state holds no clock
 * and the search covers every run however long (only the number of
 * holdings per lease, MAXTOK, and of sockets, NS, bound it). Any process
 * may act at any tick or not at all: a paused instance (or agent) is one
 * that takes no step while time runs, and a dropped socket is one whose
 * frames are never read. With one clock there is no drift, and the drift
 * margin of §2 becomes strict inequalities with no slack at all:
 *   - the agent leads while now < heartbeat send + W [A3]; a heartbeat in
 *     flight carries its worth, send + W - now;
 *   - an owner may end a session once now >= last message + W [S3];
 *   - a write sent at w is safe while w + TTL >= now + W [S2][S5];
 *   - a holding decided at d runs out at d + TTL, when the contender may
 *     take it;
 *   - A4 caps an unacked lease at acquire send + TTL.
 * The tick count `tick` is a hidden variable, outside the state, only to
 * print the time in a trail.
 * The invariant (monitor, below): no holding of a lease begins (the
 * contender's, or the agent's own with a new fencing token) while the
 * agent leads another holding of it by its own rule: at no state does the
 * agent lead (name, token) while the backend's latest token of the name
 * is another. Operators' revokes are outside the guarantee and not
 * modelled.
 *
 * Rules, each selected by a macro (spin -DS5 -DS6 -DA4 -DA5, or
 * -DNEW_RULES for all four; without them, today's rules):
 *   S5  an acquire's result (and each lease a resumed lists) is queued only
 *       when the write it answers is safe for a window beyond that moment;
 *       else renew once and answer from that, else error (or lost) and end.
 *   S6  the result is queued in the step that puts the lease in the table;
 *       without it a push may be queued between the two.
 *   A4  an ack counts for a lease only when it arrived after the lease's
 *       answer; until then the lease is led at most until min(A3 deadline,
 *       acquire send + TTL).
 *   A5  a lost for (name, token) while an acquire of the name is in
 *       flight is remembered, and a result with that token is not led.
 */

#ifdef NEW_RULES
#define S5
#define S6
#define A4
#define A5
#endif
#ifdef S5
#define S5ON 1
#else
#define S5ON 0
#endif
#ifdef S6
#define S6ON 1
#else
#define S6ON 0
#endif
#ifdef A4
#define A4ON 1
#else
#define A4ON 0
#endif
#ifdef A5
#define A5ON 1
#else
#define A5ON 0
#endif

/* Bounds: override with -D. */
#ifndef W
#define W 2          /* the window, in ticks */
#endif
#ifndef TTL
#define TTL 4        /* the session lease TTL, in ticks (> W) */
#endif
#ifndef NS
#define NS 3         /* sockets, one per owner: epochs 1 .. NS */
#endif
#ifndef NL
#define NL 2         /* leases: 1 or 2 */
#endif
#ifndef MAXTOK
#define MAXTOK 3     /* holdings per lease */
#endif
#ifndef QA
#define QA 2         /* frames in flight, agent to owner, per socket */
#endif
#ifndef QB
#define QB 2         /* frames in flight, owner to agent, per socket */
#endif

/* A write just sent is safe for SAFEW more ticks (w + TTL >= now + W). */
#define SAFEW (TTL - W + 1)

mtype = { OPEN, RES, HB, ACQ, REL,                                   /* agent to owner */
          OPENED, RESUMED, RESERR, ACK, RESULT, ERR, LOST, RELOK };  /* owner to agent */

/* One socket per epoch, a FIFO each way (TCP: in order or not at all). */
chan toI[NS] = [QA] of { mtype, byte, byte };
chan toA[NS] = [QB] of { mtype, byte, byte };

hidden byte tick;     /* only printed */

/* The backend: per lease, the latest holding (token, who, whether it
 * ended, ticks until it runs out, the session epoch it carries); the
 * session record's epoch, and whether it ended. */
#define NONE 0
#define SESS 1
#define CONT 2
byte btok[NL];
byte bhold[NL];
bool balive[NL];
byte bttl[NL];
byte bep[NL];
byte rep;
bool rended;
#define LIVEB(l) (balive[l] && bttl[l] > 0)
#ifdef PROBE
byte bbeg[NL];       /* the epoch a holding began at (probes only) */
#define PROBEBEGIN(l, e) bbeg[l] = e
#else
#define PROBEBEGIN(l, e) skip
#endif

/* The agent. */
byte cur;            /* the current socket [A2] */
byte alead;          /* A3: leads for alead more ticks */
byte held[NL];       /* token it holds, 0 for none */
bool afl[NL];        /* an acquire of the name in flight on cur */
byte acap[NL];       /* A4: acquire send + TTL - now */
bool acked[NL];      /* A4: an ack arrived after the lease's answer */
byte lmem[NL];       /* A5: a loss before its answer */
bool aopened;        /* it read opened: it knows the session id */
bool agone;          /* the session is gone for the agent */

/* The owners. */
#define IDLE 0
#define RESUMING 1
#define LIVE 2
#define DONE 3
byte ost[NS];        /* state */
byte osil[NS];       /* ticks before it may end the session [S3] */
bool obroken[NS];    /* its socket closed on a full queue (1013) */
byte ores[NS];       /* resume decided: 1 taken over, 2 refused, 3 renewed once [S5] */
byte orm[NS];        /* resume: claimed leases lost (bit per lease) */
bool oren[NS];       /* a renewal round in flight */
byte orw[NS];        /* its write: safe for orw more ticks */
/* per owner and lease, [k*NL + l] */
byte otok[NS*NL];    /* the table: token, 0 when not in it */
byte ow[NS*NL];      /* its last successful write: safe for ow more ticks [S2] */
byte orr[NS*NL];     /* renewal round outcome: 1 ok, 2 lost, 3 moved */
byte oa[NS*NL];      /* an acquire in flight at the backend, below */
byte oat[NS*NL];     /* its token */
byte oaw[NS*NL];     /* its write: safe for oaw more ticks */
#define AG 1         /* granted, answer on its way back */
#define AR 2         /* refused (held by another, or out of tokens) */
#define AM 3         /* found the session at a higher epoch [S4] */
#define ARN 4        /* granted, renewed once for S5, answer on its way */
#define ARF 5        /* the S5 renewal failed */
#define AQ 6         /* in the table, result not queued yet (no S6) */

hidden byte i, j, n;
hidden byte hs, hc, ha;
hidden mtype hm;
hidden byte hx, hy;

#define KL(k, l) ((k)*NL + (l))
/* An owner whose frames reach nobody: its socket retired [A2] or closed. */
#define MUTE(k) ((k) < cur || obroken[k])

/* Whether the agent leads lease l by its own rule: A3, and until an ack
 * arrives after the lease's answer, A4's cap. */
#define LEADS(l) (held[l] != 0 && alead > 0 && (!A4ON || acked[l] || acap[l] > 0))
#define BAD(l) (LEADS(l) && btok[l] != held[l])
#if NL > 1
#define ANYBAD (BAD(0) || BAD(1))
#else
#define ANYBAD BAD(0)
#endif

/* An owner that can change nothing any more is as good as done, and is
 * marked so (not a step of anyone: this only spares the search states
 * that differ there). That is an owner whose frames reach nobody (MUTE),
 * with the record above its epoch (its death would end no record), no live
 * holding at its epoch (every write it has in flight or could make of its
 * table is a compare-and-set at its epoch that fails or ends nothing), and
 * no acquire left for it to read (only heartbeats and releases, which
 * then change nothing). An owner that has not read its resume yet is done
 * once the record is at its epoch or above (the resume would be refused). */
inline settle() {
  for (j : 0 .. NS-1) {
    if
    :: ost[j] == IDLE && MUTE(j) && rep >= j + 1 && j > 0 -> ostop(j); do :: nempty(toI[j]) -> toI[j]?_, _, _ :: empty(toI[j]) -> break od
    :: (ost[j] == LIVE || ost[j] == RESUMING) && MUTE(j) && rep > j + 1 ->
       hs = 1;
       for (i : 0 .. NL-1) {
         if :: bhold[i] == SESS && bep[i] == j + 1 && balive[i] -> hs = 0 :: else -> skip fi
       }
       n = len(toI[j]);
       do
       :: n > 0 -> toI[j]?hm, hx, hy; if :: hm == ACQ -> hs = 0 :: else -> skip fi; toI[j]!hm, hx, hy; n--
       :: n == 0 -> break
       od;
       if
       :: hs -> ostop(j); do :: nempty(toI[j]) -> toI[j]?_, _, _ :: empty(toI[j]) -> break od
       :: else -> skip
       fi
    :: else -> skip
    fi
  }
  i = 0; j = 0; n = 0; hs = 0; hm = 0; hx = 0; hy = 0
}

#include "owner.pml"
#include "agent.pml"

/* ------------------------------------------------------------- contender */

/* Another holder acquires through the backend when the lease is free or
 * has run out (a new holding, a new token), and may release it. */
inline cacquire(l) {
  d_step {
    !LIVEB(l) && btok[l] < MAXTOK ->
    btok[l]++; bhold[l] = CONT; balive[l] = 1; bttl[l] = TTL; bep[l] = 0;
    PROBEBEGIN(l, 0);
    printf("t%d backend: L%d/%d begins for the contender\n", tick, l, btok[l])
  }
}

inline crelease(l) {
  d_step { bhold[l] == CONT && balive[l] -> balive[l] = 0; bhold[l] = NONE; bttl[l] = 0 }
}

active proctype contender() {
end:
  do
  :: cacquire(0)
#ifdef RELEASE
  :: crelease(0)
#endif
#if NL > 1
  :: cacquire(1)
#ifdef RELEASE
  :: crelease(1)
#endif
#endif
  od
}

/* ----------------------------------------------------------------- clock */

/* Ages the frames of a channel: a heartbeat's or an ack's worth. */
inline agech(q) {
  n = len(q);
  do
  :: n > 0 ->
     q?hm, hx, hy;
     if :: (hm == HB || hm == ACK) && hx > 0 -> hx-- :: else -> skip fi;
     q!hm, hx, hy;
     n--
  :: n == 0 -> break
  od;
  hm = 0; hx = 0; hy = 0
}

#define DEC(v) if :: v > 0 -> v-- :: else -> skip fi

/* A tick: every timer counts down. */
active proctype clock() {
end:
  do
  :: d_step {
       tick++;
       DEC(alead);
       for (i : 0 .. NL-1) {
         DEC(acap[i]);
         /* a holding that runs out is as good as ended */
         if :: bttl[i] == 1 -> bttl[i] = 0; balive[i] = 0 :: bttl[i] > 1 -> bttl[i]-- :: else -> skip fi
       }
       for (j : 0 .. NS-1) {
         DEC(osil[j]); DEC(orw[j]);
         for (i : 0 .. NL-1) { DEC(ow[KL(j, i)]); DEC(oaw[KL(j, i)]) }
         agech(toI[j]); agech(toA[j])
       }
       i = 0; j = 0;
       settle()
     }
  od
}

/* --------------------------------------------------------------- monitor */

/* The invariant of §14: the agent never leads (name, token) by its own
 * rule while another holding of the name has begun. */
active proctype monitor() {
end:
  atomic {
    ANYBAD ->
#if NL > 1
    printf("t%d VIOLATION: the agent leads L0/%d L1/%d (for %d more ticks) while the latest holdings are L0/%d L1/%d\n",
      tick, held[0], held[1], alead, btok[0], btok[1]);
#else
    printf("t%d VIOLATION: the agent leads L0/%d (for %d more ticks) while the latest holding is L0/%d\n",
      tick, held[0], alead, btok[0]);
#endif
    assert(false)
  }
}

#ifdef PROBE
/* Reachability probes, -DPROBE=n: an assertion fails where probe n holds,
 * so the search shows that the model gets there (that the invariant does
 * not hold only because nothing happens):
 *   1  the agent leads, by the ack of a heartbeat sent a tick or more
 *      after its resume (so on its second socket), a lease that began at
 *      epoch 1 and moved to epoch 2, the first owner done;
 *   2  the agent leads a second holding of a lease (token 2) after the
 *      contender's holding, or its own first one, ended;
 *   3  the agent leads both leases at once. */
#if PROBE == 1
#define PROBEX (cur == 1 && LEADS(0) && alead == W && ost[0] == DONE && bep[0] == 2 && bbeg[0] == 1 && ost[1] == LIVE && ow[KL(1, 0)] > 0 && ow[KL(1, 0)] < SAFEW)
#elif PROBE == 2
#define PROBEX (LEADS(0) && held[0] == 2)
#else
#define PROBEX (LEADS(0) && LEADS(NL-1) && NL > 1)
#endif
active proctype probe() {
end:
  atomic { PROBEX -> printf("t%d PROBE %d reached\n", tick, PROBE); assert(false) }
}
#endif
