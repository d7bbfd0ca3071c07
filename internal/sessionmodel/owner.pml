/*
 * owner.pml: the owners of the session, one per epoch (included by
 * sessions.pml). Owner k serves socket k and, once its open or resume is
 * registered, owns the session at epoch k+1. Every backend write is
 * decided in the step that sends it; its answer reaches the owner in a
 * later step, any time later.
 */

/* A frame that finds the owner's queue full closes the socket (1013):
 * what was queued is dropped, and nothing more is read or written on it
 * (what the agent still sends on it is dropped too). Its owner's safe
 * deadlines, which only decide acks, are zeroed once it is live. */
inline closesock(k) {
  obroken[k] = 1;
  do :: nempty(toA[k]) -> toA[k]?_, _, _ :: empty(toA[k]) -> break od;
  do :: nempty(toI[k]) -> toI[k]?_, _, _ :: empty(toI[k]) -> break od;
  if :: ost[k] == LIVE -> for (i : 0 .. NL-1) { ow[KL(k, i)] = 0 }; i = 0 :: else -> skip fi;
  printf("t%d owner%d: socket closed, queue full (1013)\n", tick, k)
}

/* An ack queued right behind another ack replaces it: the agent, reading
 * both in a row, would end with the later one's worth (its heartbeat was
 * sent later), and each counts for the same leases [A4]. This only spares
 * the search states that differ there. */
inline ackmerge(k, a) {
  ha = a; n = len(toA[k]);
  do
  :: n > 0 ->
     toA[k]?hm, hx, hy;
     if :: n == 1 && hm == ACK -> skip :: else -> toA[k]!hm, hx, hy fi;
     n--
  :: n == 0 -> break
  od;
  hm = 0; hx = 0; hy = 0;
  if
  :: nfull(toA[k]) -> toA[k]!ACK, ha, 0
  :: full(toA[k]) -> closesock(k)
  fi;
  ha = 0
}

/* An owner queues a frame on its socket: nothing once it is done (moved or
 * dead: the socket is closed) or the socket is closed; a frame that finds
 * the queue full closes it with 1013, dropping what was queued. Frames on
 * a retired socket count for nothing [A2], so they are dropped here. */
inline osend(k, t, a, b) {
  if
  :: ost[k] == DONE || obroken[k] || k < cur -> skip
  :: else ->
     if
     :: t == ACK && nempty(toA[k]) -> ackmerge(k, a)
     :: t != ACK || empty(toA[k]) ->
        if
        :: nfull(toA[k]) -> toA[k]!t, a, b
        :: full(toA[k]) -> closesock(k)
        fi
     fi
  fi
}

/* An owner forgets the acquire of lease l in flight. */
inline oclear(k, l) { oa[KL(k, l)] = 0; oat[KL(k, l)] = 0; oaw[KL(k, l)] = 0 }

/* An owner removes a lease from its table. */
inline odrop(k, l) { otok[KL(k, l)] = 0; ow[KL(k, l)] = 0; orr[KL(k, l)] = 0 }

/* An owner stops: clears what it keeps (nothing it would do matters). */
inline ostop(k) {
  ost[k] = DONE; osil[k] = 0; oren[k] = 0; orw[k] = 0; ores[k] = 0; orm[k] = 0;
  for (i : 0 .. NL-1) { odrop(k, i); oclear(k, i) }
  i = 0
}

/* [S4] An end of holding (l, tok) through the session at epoch E: a
 * compare-and-set on the session and its epoch. */
inline cas_end(E, l, tok) {
  if
  :: bhold[l] == SESS && btok[l] == tok && bep[l] == E && balive[l] -> balive[l] = 0; bttl[l] = 0
  :: else -> skip
  fi
}

/* An owner reads the next frame of its socket. */
inline oread(k) {
  d_step {
    (ost[k] == IDLE || ost[k] == LIVE) && !obroken[k] && nempty(toI[k]) ->
    toI[k]?hm, hx, hy;
    osil[k] = W;
    if
    :: hm == OPEN ->
       rep = 1; ost[k] = LIVE;
       printf("t%d owner%d: open, epoch 1\n", tick, k);
       osend(k, OPENED, 0, 0)
    :: hm == RES ->
       /* [S1][Resume] a resume proposing k+1, decided at once: the record
        * only if below k+1, then each claimed lease only if held (or ended
        * while nobody acquired since) by that token through the session at
        * a lower epoch; it moves to k+1 and is extended by the TTL */
       ost[k] = RESUMING; osil[k] = 0;
       if
       :: rended || rep >= k + 1 ->
          ores[k] = 2;
          printf("t%d owner%d: resume epoch %d refused (record at %d, ended %d) [S1]\n", tick, k, k + 1, rep, rended)
       :: else ->
          rep = k + 1; ores[k] = 1;
          for (i : 0 .. NL-1) {
            hc = (i == 0 -> hx : hy);
            if
            :: hc == 0 -> skip
            :: hc != 0 && bhold[i] == SESS && btok[i] == hc && bep[i] < k + 1 ->
               bep[i] = k + 1; balive[i] = 1; bttl[i] = TTL;
               otok[KL(k, i)] = hc; ow[KL(k, i)] = SAFEW
            :: else -> orm[k] = orm[k] | (1 << i)
            fi
          }
          i = 0; hc = 0;
          printf("t%d owner%d: resume epoch %d takes the record and the claims it can (lost mask %d) [S1]\n", tick, k, k + 1, orm[k])
       fi
    :: hm == HB ->
       /* [S2] an ack only while it owns the session and every lease of
        * its table is safe for a window; decided and queued in one step */
       hs = 1;
       for (i : 0 .. NL-1) {
         if :: otok[KL(k, i)] != 0 && ow[KL(k, i)] == 0 -> hs = 0 :: else -> skip fi
       }
       i = 0;
       if
       :: hs ->
          printf("t%d owner%d: heartbeat (worth %d) acked: every lease of its table safe [S2]\n", tick, k, hx);
          osend(k, ACK, hx, 0)
       :: else -> printf("t%d owner%d: heartbeat not acked: a lease is not safe [S2]\n", tick, k)
       fi;
       hs = 0
    :: hm == ACQ ->
       /* an acquire, decided at once [S4]; its answer comes back later */
       assert(oa[KL(k, hx)] == 0);
       oaw[KL(k, hx)] = SAFEW;
       if
       :: bhold[hx] == SESS && bep[hx] > k + 1 ->
          oa[KL(k, hx)] = AM
       :: else ->
          if
          :: LIVEB(hx) && bhold[hx] == SESS ->
             /* the session's own live holding: same token, moved here */
             bep[hx] = k + 1; bttl[hx] = TTL;
             oa[KL(k, hx)] = AG; oat[KL(k, hx)] = btok[hx]
          :: LIVEB(hx) && bhold[hx] != SESS ->
             oa[KL(k, hx)] = AR
          :: else ->
             if
             :: btok[hx] < MAXTOK ->
                btok[hx]++; bhold[hx] = SESS; balive[hx] = 1; bttl[hx] = TTL; bep[hx] = k + 1;
                PROBEBEGIN(hx, k + 1);
                oa[KL(k, hx)] = AG; oat[KL(k, hx)] = btok[hx];
                printf("t%d backend: L%d/%d begins for the session at epoch %d\n", tick, hx, btok[hx], k + 1)
             :: else -> oa[KL(k, hx)] = AR
             fi
          fi
       fi;
       if
       :: oa[KL(k, hx)] == AG -> printf("t%d owner%d: acquire L%d decided: L%d/%d, answer on its way\n", tick, k, hx, hx, oat[KL(k, hx)])
       :: oa[KL(k, hx)] == AR -> printf("t%d owner%d: acquire L%d decided: refused, answer on its way\n", tick, k, hx)
       :: oa[KL(k, hx)] == AM -> printf("t%d owner%d: acquire L%d decided: session at a higher epoch [S4]\n", tick, k, hx)
       fi;
       if :: oa[KL(k, hx)] != AG -> oaw[KL(k, hx)] = 0 :: else -> skip fi
    :: hm == REL ->
       /* a release, decided and answered at once [S4] */
       if
       :: otok[KL(k, hx)] == hy ->
          if
          :: bhold[hx] == SESS && btok[hx] == hy && bep[hx] == k + 1 && balive[hx] ->
             balive[hx] = 0; bttl[hx] = 0; bhold[hx] = NONE  /* released: free */
          :: else -> skip
          fi;
          odrop(k, hx)
       :: else -> skip
       fi;
       osend(k, RELOK, hx, hy)
    fi;
    hm = 0; hx = 0; hy = 0;
    settle()
  }
}

/* [S1][S5][Resume] The resume's answer reaches the owner: it registers
 * (counted as a message received [S3]) and queues resumed in that step.
 * With S5, a lease whose takeover is not safe for a window now is written
 * once more first (decided at once, its answer in a later step: ores 3),
 * and one still not safe then is reported lost and ended. */
#define UNSAFE_CLAIM(k, i) (otok[KL(k, i)] != 0 && ow[KL(k, i)] == 0)
inline oregister(k) {
  d_step {
    ost[k] == RESUMING ->
    hs = 0;
    for (i : 0 .. NL-1) { if :: UNSAFE_CLAIM(k, i) -> hs = 1 :: else -> skip fi }
    if
    :: ores[k] == 2 ->
       osend(k, RESERR, 0, 0); ostop(k)
    :: ores[k] == 1 && S5ON && hs ->
       /* [S5] a takeover answered late: renew it once */
       for (i : 0 .. NL-1) {
         if
         :: UNSAFE_CLAIM(k, i) && bhold[i] == SESS && btok[i] == otok[KL(k, i)] && bep[i] == k + 1 && LIVEB(i) ->
            bttl[i] = TTL; ow[KL(k, i)] = SAFEW
         :: UNSAFE_CLAIM(k, i) && bhold[i] == SESS && btok[i] == otok[KL(k, i)] && bep[i] > k + 1 ->
            ores[k] = 2  /* a later resume took it: conflict */
         :: UNSAFE_CLAIM(k, i) -> orm[k] = orm[k] | (1 << i); odrop(k, i)
         :: else -> skip
         fi
       }
       if :: ores[k] == 1 -> ores[k] = 3 :: else -> skip fi;
       printf("t%d owner%d: resume answered late: claims renewed once (lost mask %d) [S5]\n", tick, k, orm[k])
    :: else ->
       ost[k] = LIVE; osil[k] = W;
       for (i : 0 .. NL-1) {
         if
         :: S5ON && UNSAFE_CLAIM(k, i) ->
            cas_end(k + 1, i, otok[KL(k, i)]);
            orm[k] = orm[k] | (1 << i); odrop(k, i)
         :: else -> skip
         fi
       }
       if :: MUTE(k) -> for (i : 0 .. NL-1) { ow[KL(k, i)] = 0 } :: else -> skip fi;
       printf("t%d owner%d: registered at epoch %d, resumed queued, lost mask %d [S1][S3][S5]\n", tick, k, k + 1, orm[k]);
       osend(k, RESUMED, orm[k], 0);
       ores[k] = 0; orm[k] = 0
    fi;
    i = 0; hs = 0;
    settle()
  }
}

/* The answer to an acquire of lease l reaches owner k. */
inline oanswer(k, l) {
  d_step {
    oa[KL(k, l)] != 0 && oa[KL(k, l)] != AQ ->
    if
    :: oa[KL(k, l)] == AM ->
       printf("t%d owner%d: acquire L%d found a higher epoch: moved [S4]\n", tick, k, l);
       ostop(k)
    :: oa[KL(k, l)] == AR || oa[KL(k, l)] == ARF ->
       osend(k, ERR, l, 0); oclear(k, l)
    :: (oa[KL(k, l)] == AG || oa[KL(k, l)] == ARN) && S5ON && oaw[KL(k, l)] == 0 ->
       if
       :: oa[KL(k, l)] == AG ->
          /* [S5] answered late: renew once (decided at once), answer
           * from that renewal when its own answer comes back */
          if
          :: bhold[l] == SESS && btok[l] == oat[KL(k, l)] && bep[l] == k + 1 && LIVEB(l) ->
             bttl[l] = TTL; oaw[KL(k, l)] = SAFEW; oa[KL(k, l)] = ARN
          :: bhold[l] == SESS && btok[l] == oat[KL(k, l)] && bep[l] > k + 1 ->
             oa[KL(k, l)] = AM
          :: else -> oa[KL(k, l)] = ARF
          fi;
          printf("t%d owner%d: acquire L%d answered late: renews it (%d: 4 ok, 5 lost, 3 moved) [S5]\n", tick, k, l, oa[KL(k, l)])
       :: else ->
          /* [S5] still not safe: error 503, the holding ended [S4] */
          printf("t%d owner%d: acquire L%d still not safe: error, holding ended [S5]\n", tick, k, l);
          cas_end(k + 1, l, oat[KL(k, l)]);
          osend(k, ERR, l, 0); oclear(k, l)
       fi
    :: else ->
       /* granted and (with S5) safe: into the table */
       if :: otok[KL(k, l)] != oat[KL(k, l)] -> orr[KL(k, l)] = 0 :: else -> skip fi;
       otok[KL(k, l)] = oat[KL(k, l)]; ow[KL(k, l)] = (MUTE(k) -> 0 : oaw[KL(k, l)]);
       if
       :: S6ON ->
          /* [S6] the result is queued in the step that puts it in the table */
          printf("t%d owner%d: L%d/%d into the table, result queued in the same step [S6]\n", tick, k, l, oat[KL(k, l)]);
          osend(k, RESULT, l, oat[KL(k, l)]); oclear(k, l)
       :: else ->
          /* today: into the table, unlock; the result is queued later */
          printf("t%d owner%d: L%d/%d into the table (result not queued yet)\n", tick, k, l, oat[KL(k, l)]);
          oa[KL(k, l)] = AQ; oaw[KL(k, l)] = 0
       fi
    fi;
    settle()
  }
}

/* Without S6: the result is queued, after whatever came between. */
inline oqueue(k, l) {
  d_step {
    oa[KL(k, l)] == AQ ->
    printf("t%d owner%d: result L%d/%d queued\n", tick, k, l, oat[KL(k, l)]);
    osend(k, RESULT, l, oat[KL(k, l)]); oclear(k, l);
    settle()
  }
}

/* [S4] A renewal round of the table, decided at once (each lease a
 * compare-and-set on the session and epoch); answered later. */
inline orenew(k) {
  d_step {
    ost[k] == LIVE && !oren[k] && (otok[KL(k, 0)] != 0
#if NL > 1
      || otok[KL(k, 1)] != 0
#endif
    ) ->
    oren[k] = 1; orw[k] = (MUTE(k) -> 0 : SAFEW);
    for (i : 0 .. NL-1) {
      if
      :: otok[KL(k, i)] == 0 -> skip
      :: otok[KL(k, i)] != 0 && bhold[i] == SESS && btok[i] == otok[KL(k, i)] && bep[i] == k + 1 && LIVEB(i) ->
         bttl[i] = TTL; orr[KL(k, i)] = 1
      :: otok[KL(k, i)] != 0 && bhold[i] == SESS && btok[i] == otok[KL(k, i)] && bep[i] > k + 1 ->
         orr[KL(k, i)] = 3
      :: else -> orr[KL(k, i)] = 2
      fi
    }
    i = 0;
    printf("t%d owner%d: renewal round decided (per lease: 1 renewed, 2 lost, 3 moved): %d %d\n", tick, k, orr[KL(k, 0)], orr[KL(k, NL-1)]);
    settle()
  }
}

/* [S2] The round's answer: successes move the safe deadline; each loss
 * leaves the table with its lost queued in the same step, before every
 * ack decided after it; a higher epoch means moved [S4]. */
inline orenewed(k) {
  d_step {
    oren[k] ->
    hs = 0;
    for (i : 0 .. NL-1) {
      if
      :: orr[KL(k, i)] == 1 -> ow[KL(k, i)] = (MUTE(k) -> 0 : orw[k])
      :: orr[KL(k, i)] == 2 ->
         printf("t%d owner%d: renewal answer: L%d/%d lost, lost queued [S2]\n", tick, k, i, otok[KL(k, i)]);
         osend(k, LOST, i, otok[KL(k, i)]); odrop(k, i)
      :: orr[KL(k, i)] == 3 -> hs = 1
      :: else -> skip
      fi;
      orr[KL(k, i)] = 0
    }
    i = 0; oren[k] = 0; orw[k] = 0;
    if
    :: hs -> printf("t%d owner%d: renewal found a higher epoch: moved [S4]\n", tick, k); ostop(k)
    :: else -> skip
    fi;
    hs = 0;
    settle()
  }
}

/* An event (another holding of a lease of the table began): the lease
 * leaves the table, its lost queued in the same step [S2]. */
inline oevent(k, l) {
  d_step {
    ost[k] == LIVE && otok[KL(k, l)] != 0 && btok[l] != otok[KL(k, l)] ->
    printf("t%d owner%d: event: L%d/%d taken, lost queued [S2]\n", tick, k, l, otok[KL(k, l)]);
    osend(k, LOST, l, otok[KL(k, l)]); odrop(k, l);
    settle()
  }
}

/* [Death][S3] No message for a whole window: every holding of the
 * session at this epoch ends (a compare-and-set each [S4]), then the
 * record (also at this epoch). */
inline odeath(k) {
  d_step {
    ost[k] == LIVE && osil[k] == 0 ->
    for (i : 0 .. NL-1) {
      if :: bhold[i] == SESS && bep[i] == k + 1 && balive[i] -> balive[i] = 0; bttl[i] = 0 :: else -> skip fi
    }
    i = 0;
    if :: rep == k + 1 -> rended = 1 :: else -> skip fi;
    printf("t%d owner%d: no message for a window: session dead, its epoch-%d holdings end [Death][S3]\n", tick, k, k + 1);
    ostop(k);
    settle()
  }
}

active [NS] proctype owner() {
end:
  do
  :: oread(_pid)
  :: oregister(_pid)
  :: oanswer(_pid, 0)
  :: oqueue(_pid, 0)
  :: oevent(_pid, 0)
#if NL > 1
  :: oanswer(_pid, 1)
  :: oqueue(_pid, 1)
  :: oevent(_pid, 1)
#endif
  :: orenew(_pid)
  :: orenewed(_pid)
  :: odeath(_pid)
  od
}

