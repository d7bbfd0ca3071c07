# Prints, for each failed test, the output go test -v attributed to it
# (its messages appear under "=== NAME" lines when tests run in parallel).
function flush(pkg,   t, i) {
  for (t in failed) {
    if (n[t] == 0) continue
    print "--- output of " pkg " " t
    for (i = 0; i < n[t]; i++) print out[t, i]
  }
  split("", failed); split("", n); split("", out); cur = ""
}
/^=== (RUN|CONT|NAME|PAUSE) / { cur = $3; next }
/^ *--- (PASS|FAIL|SKIP): / { if ($2 == "FAIL:") failed[$3] = 1; next }
/^(ok|FAIL)[ \t]+[^ \t]+[ \t]/ { flush($2); next }
/^(PASS|FAIL)$/ { next }
{ if (cur != "" && n[cur] < 150) out[cur, n[cur]++] = $0 }
