package main

import (
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// buildInfo is what `xkeeper version` prints.
type buildInfo struct {
	Version string `json:"version"`
	Commit  string `json:"commit"`
	Dirty   bool   `json:"dirty,omitempty"`
	Go      string `json:"go"`
}

// releaseVersion is set at link time by release builds (-X main.releaseVersion=1.2.3);
// otherwise the module version, "(devel)" for a build from a checkout.
var releaseVersion = ""

func readBuildInfo() buildInfo {
	b := buildInfo{Version: releaseVersion, Commit: "unknown", Go: runtime.Version()}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	if b.Version == "" {
		b.Version = info.Main.Version
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Commit = s.Value
		case "vcs.modified":
			b.Dirty = s.Value == "true"
		}
	}
	return b
}

func newVersion(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print xkeeper's version, commit and Go version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b := readBuildInfo()
			if g.format == "json" {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(b)
			}
			dirty := ""
			if b.Dirty {
				dirty = " (modified)"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "xkeeper %s\ncommit %s%s\n%s\n", b.Version, b.Commit, dirty, b.Go)
			return nil
		},
	}
}
