/*
 * agent.pml: the agent (included by sessions.pml): rules A1 to A5.
 */

/* What the retirement of socket k makes irrelevant, zeroed so that the
 * search does not tell apart states that differ only there (not a step
 * of anyone): its heartbeats' worth (their acks are dropped), and, once
 * its owner is live, the owner's safe deadlines (they only decide acks). */
inline retire(k) {
  n = len(toI[k]);
  do
  :: n > 0 -> toI[k]?hm, hx, hy; if :: hm == HB -> hx = 0 :: else -> skip fi; toI[k]!hm, hx, hy; n--
  :: n == 0 -> break
  od;
  hm = 0; hx = 0; hy = 0;
  if
  :: ost[k] == LIVE -> for (i : 0 .. NL-1) { ow[KL(k, i)] = 0 }; i = 0
  :: else -> skip
  fi
}

/* The agent sends a frame on the current socket (dropped when the
 * socket was closed: nothing reads it). */
#define ACANSEND (obroken[cur] || nfull(toI[cur]))
inline asend(t, a, b) {
  if
  :: obroken[cur] -> skip
  :: !obroken[cur] -> toI[cur]!t, a, b
  fi
}

/* An acquire of lease l on the current socket [A2]. */
inline aacquire(l) {
  d_step {
    !agone && !afl[l] && held[l] == 0 && ACANSEND ->
    asend(ACQ, l, 0); afl[l] = 1;
    if :: A4ON -> acap[l] = TTL :: else -> skip fi;
    printf("t%d agent: acquire L%d on socket %d\n", tick, l, cur)
  }
}

/* A release of lease l: it stops leading when it sends it. */
inline arelease(l) {
  d_step {
    !agone && held[l] != 0 && ACANSEND ->
    asend(REL, l, held[l]);
    printf("t%d agent: release L%d/%d, stops leading it\n", tick, l, held[l]);
    held[l] = 0; acked[l] = 0; acap[l] = 0
  }
}

active proctype agent() {
  toI[0]!OPEN, 0, 0;
end:
  do
  :: d_step {
       /* [A2][A3] a heartbeat on the current socket, worth W ticks of
        * lead from its send if its ack counts */
       !agone && ACANSEND ->
       asend(HB, W, 0);
       printf("t%d agent: heartbeat on socket %d\n", tick, cur)
     }
  :: aacquire(0)
#ifdef RELEASE
  :: arelease(0)
#endif
#if NL > 1
  :: aacquire(1)
#ifdef RELEASE
  :: arelease(1)
#endif
#endif
  :: d_step {
       /* [A1][A2] resume on a new socket, proposing an epoch above every
        * one seen or proposed (socket k proposes k+1), claiming what it
        * holds; the old socket is retired: nothing on it counts, its
        * acquires are forgotten (acquired again through the new one) */
       !agone && aopened && cur + 1 < NS ->
       do :: nempty(toA[cur]) -> toA[cur]?_, _, _ :: empty(toA[cur]) -> break od;
       retire(cur);
       cur++;
#if NL > 1
       toI[cur]!RES, held[0], held[1];
#else
       toI[cur]!RES, held[0], 0;
#endif
#if NL > 1
       printf("t%d agent: resume on socket %d proposing epoch %d, claims L0/%d L1/%d [A1][A2]\n", tick, cur, cur + 1, held[0], held[1]);
#else
       printf("t%d agent: resume on socket %d proposing epoch %d, claims L0/%d [A1][A2]\n", tick, cur, cur + 1, held[0]);
#endif
       for (i : 0 .. NL-1) {
         afl[i] = 0; lmem[i] = 0;
         if :: held[i] == 0 -> acap[i] = 0 :: else -> skip fi
       }
       i = 0;
       settle()
     }
  :: d_step {
       /* a frame on the current socket, read in order [A2] */
       !agone && nempty(toA[cur]) ->
       toA[cur]?hm, hx, hy;
       if
       :: hm == ACK ->
          /* [A3] leads until its heartbeat's send + W; [A4] it counts for
           * the leases whose answer came before it */
          if :: hx > alead -> alead = hx :: else -> skip fi;
          printf("t%d agent: ack: leads %d more ticks [A3]\n", tick, alead);
          for (i : 0 .. NL-1) { if :: A4ON && held[i] != 0 -> acked[i] = 1; acap[i] = 0 :: else -> skip fi }
          i = 0
       :: hm == RESULT ->
          assert(afl[hx]);
          afl[hx] = 0;
          if
          :: A5ON && lmem[hx] == hy ->
             printf("t%d agent: result L%d/%d after its lost: not led [A5]\n", tick, hx, hy);
             acap[hx] = 0
          :: else ->
             held[hx] = hy; acked[hx] = 0;
             printf("t%d agent: result L%d/%d: leads it [A3][A4]\n", tick, hx, hy)
          fi;
          lmem[hx] = 0
       :: hm == ERR ->
          afl[hx] = 0; lmem[hx] = 0;
          if :: held[hx] == 0 -> acap[hx] = 0 :: else -> skip fi;
          printf("t%d agent: acquire L%d answered error\n", tick, hx)
       :: hm == LOST ->
          if
          :: held[hx] == hy ->
             held[hx] = 0; acked[hx] = 0; acap[hx] = 0;
             printf("t%d agent: lost L%d/%d: stops leading it\n", tick, hx, hy)
          :: held[hx] != hy && A5ON && afl[hx] ->
             lmem[hx] = hy;
             printf("t%d agent: lost L%d/%d before its answer: remembered [A5]\n", tick, hx, hy)
          :: else ->
             printf("t%d agent: lost L%d/%d for a holding it does not hold: ignored\n", tick, hx, hy)
          fi
       :: hm == RESUMED ->
          for (i : 0 .. NL-1) {
            if :: (hx & (1 << i)) && held[i] != 0 -> held[i] = 0; acked[i] = 0; acap[i] = 0 :: else -> skip fi
          }
          i = 0;
          printf("t%d agent: resumed, lost mask %d [Resume]\n", tick, hx)
       :: hm == RESERR ->
          agone = 1; alead = 0;
          for (i : 0 .. NL-1) { held[i] = 0; afl[i] = 0; acked[i] = 0; acap[i] = 0; lmem[i] = 0 }
          i = 0;
          printf("t%d agent: resume refused: the session is gone\n", tick)
       :: hm == OPENED -> aopened = 1  /* it has the session id: it may resume */
       :: else -> skip  /* a release answered */
       fi;
       hm = 0; hx = 0; hy = 0
     }
  od
}

