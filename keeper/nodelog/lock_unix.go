//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package nodelog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockDir takes the log directory's lock file for this process, or fails
// with ErrInUse if another open log holds it.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", ErrInUse, dir)
		}
		return nil, fmt.Errorf("nodelog: lock %s: %w", dir, err)
	}
	return f, nil
}
