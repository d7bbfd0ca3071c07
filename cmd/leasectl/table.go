package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/leasesvc/leasesvc/client"
)

// writeTable prints leases as an aligned table. A PRINCIPAL column comes
// when a lease has one (a service with authentication), a line under the
// table for each lease reserved for a holder or whose holder is asked to
// step down (docs/contract.md §8), one for each lease held through a
// session (whose TTL column is then the session's window, not the record's
// TTL), and one for each holding an operator revoked.
func writeTable(w io.Writer, ls []client.Lease) error {
	principals := false
	for _, l := range ls {
		principals = principals || l.Principal != ""
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := "NAME\tHOLDER\tTOKEN\tHELD\tREMAINING\tTTL\tEXPIRES (server time)"
	if principals {
		head += "\tPRINCIPAL"
	}
	fmt.Fprintln(tw, head)
	for _, l := range ls {
		remaining, ttl, expires := durationText(l.Remaining), l.TTL.String(), l.ExpireTime.UTC().Format("2006-01-02T15:04:05.000Z")
		if l.Held && l.Session {
			// Held while its agent heartbeats: the record's TTL and expiry are
			// the service's own renewals, not the holder's (docs/contract.md §14).
			remaining, ttl, expires = "while alive", "session "+l.SessionWindow.String(), "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%v\t%s\t%s\t%s", l.Name, l.Holder, l.FencingToken, l.Held, remaining, ttl, expires)
		if principals {
			fmt.Fprintf(tw, "\t%s", l.Principal)
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	for _, l := range ls {
		var line string
		switch {
		case l.ReservedFor != "":
			line = fmt.Sprintf("%s: reserved for %s until %s\n", l.Name, l.ReservedFor, l.ReservedUntil.UTC().Format("2006-01-02T15:04:05.000Z"))
		case l.YieldRequested:
			line = fmt.Sprintf("%s: the holder is asked to step down for %s\n", l.Name, l.YieldTo)
		}
		if line == "" {
			continue
		}
		if _, err := io.WriteString(w, line); err != nil {
			return fmt.Errorf("write: %w", err)
		}
	}
	for _, l := range ls {
		if !l.Held || !l.Session {
			continue
		}
		if _, err := fmt.Fprintf(w, "%s: held through a session (window %v): free within %v of its holder's last heartbeat if the holder stops\n",
			l.Name, l.SessionWindow, l.SessionWindow); err != nil {
			return fmt.Errorf("write: %w", err)
		}
	}
	for _, l := range ls {
		if l.RevokedBy == "" && l.RevokeReason == "" {
			continue
		}
		if _, err := fmt.Fprintf(w, "%s: holding %d revoked by %s: %q\n", l.Name, l.FencingToken, l.RevokedBy, l.RevokeReason); err != nil {
			return fmt.Errorf("write: %w", err)
		}
	}
	return nil
}
