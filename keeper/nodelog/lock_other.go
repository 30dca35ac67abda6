//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package nodelog

import (
	"os"
	"path/filepath"
)

// lockDir opens the log directory's lock file; without flock it does not
// keep another process out.
func lockDir(dir string) (*os.File, error) {
	return os.OpenFile(filepath.Join(dir, lockFile), os.O_CREATE|os.O_RDWR, 0o600)
}
