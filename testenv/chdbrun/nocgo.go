//go:build !cgo

// Command chdbrun runs SQL statements in clickhouse-local loaded from
// libchdb; it needs cgo, and without it says so.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "chdbrun: built without cgo; build it with CGO_ENABLED=1 and a C compiler")
	os.Exit(1)
}
