package nodelog

import (
	"os"
	"syscall"
)

// datasync writes f's data to disk, and its metadata only where reading
// the data back needs it.
func datasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }
