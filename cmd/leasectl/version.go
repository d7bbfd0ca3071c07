package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// version is stamped at build time (-ldflags "-X main.version=v1.2.3", as
// the Dockerfile does); empty, the module version of the build info is used:
// vX.Y.Z for `go install github.com/leasesvc/leasesvc/cmd/leasectl@vX.Y.Z`,
// (devel) for a build from a checkout.
var version = ""

// cmdVersion prints leasectl's version, the commit it was built from when
// the build recorded one, and the Go version.
func cmdVersion(_ context.Context, e *env, args []string) error {
	fs := e.flags("version")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	info, _ := debug.ReadBuildInfo()
	_, err := fmt.Fprint(e.stdout, versionText(version, info))
	if err != nil {
		return fmt.Errorf("write: %w", err)
	}
	return nil
}

// versionText renders the version lines from the stamped version and the
// build info (nil when the binary has none).
func versionText(stamped string, info *debug.BuildInfo) string {
	v := stamped
	if v == "" && info != nil {
		v = info.Main.Version
	}
	if v == "" {
		v = "(devel)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "leasectl %s\n", v)
	if info != nil {
		settings := map[string]string{}
		for _, s := range info.Settings {
			settings[s.Key] = s.Value
		}
		if rev := settings["vcs.revision"]; rev != "" {
			fmt.Fprintf(&b, "commit   %s", rev)
			if t := settings["vcs.time"]; t != "" {
				fmt.Fprintf(&b, " (%s)", t)
			}
			if settings["vcs.modified"] == "true" {
				b.WriteString(", modified")
			}
			b.WriteString("\n")
		}
		if info.Main.Path != "" {
			fmt.Fprintf(&b, "module   %s\n", info.Main.Path)
		}
	}
	fmt.Fprintf(&b, "go       %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return b.String()
}
