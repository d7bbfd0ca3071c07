package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/leasesvc/leasesvc/client"
)

// writeTable prints leases as an aligned table.
func writeTable(w io.Writer, ls []client.Lease) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tHOLDER\tTOKEN\tHELD\tREMAINING\tTTL\tEXPIRES (server time)")
	for _, l := range ls {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%v\t%s\t%s\t%s\n", l.Name, l.Holder, l.FencingToken, l.Held,
			durationText(l.Remaining), l.TTL, l.ExpireTime.UTC().Format("2006-01-02T15:04:05.000Z"))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	return nil
}
