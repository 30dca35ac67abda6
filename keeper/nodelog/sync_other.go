//go:build !linux

package nodelog

import "os"

// datasync writes f to disk.
func datasync(f *os.File) error { return f.Sync() }
