package testenv

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Disk is a small ext4 filesystem of a test's own, on a loop device, that
// Freeze makes stop answering as a disk that hangs does (fsfreeze): every
// write and sync on it waits, uninterruptibly, until Thaw. Reads go on.
// Fill makes it full instead.
type Disk struct {
	Dir string // where it is mounted

	t      testing.TB
	mu     sync.Mutex
	frozen bool
}

// diskBytes is the size of a Disk's filesystem.
const diskBytes = 256 << 20

// StartDisk mounts a new filesystem for the test, unmounted when the test
// ends. It needs root, mkfs.ext4 (e2fsprogs), mount and fsfreeze
// (util-linux) and a free loop device; without them it skips the test, or
// fails it with XKEEPER_REQUIRE_DISK=1 (CI sets it).
func StartDisk(t testing.TB) *Disk {
	t.Helper()
	if os.Geteuid() != 0 {
		skipOrFail(t, "XKEEPER_REQUIRE_DISK", "a loop-mounted disk needs root")
	}
	for _, cmd := range []string{"mkfs.ext4", "mount", "umount", "fsfreeze"} {
		if _, err := exec.LookPath(cmd); err != nil {
			skipOrFail(t, "XKEEPER_REQUIRE_DISK", "a loop-mounted disk needs e2fsprogs and util-linux (apt-get install e2fsprogs util-linux): %v", err)
		}
	}
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, "disk.img"), filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(img)
	if err == nil {
		err = f.Truncate(diskBytes)
		f.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	runCmd(t, "mkfs.ext4", "-q", "-F", img)
	if out, err := exec.Command("mount", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
		skipOrFail(t, "XKEEPER_REQUIRE_DISK", "mount a loop device: %v: %s", err, out)
	}
	d := &Disk{Dir: mnt, t: t}
	t.Cleanup(func() {
		d.Thaw()
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("testenv: umount %s: %v: %s", mnt, err, out)
			exec.Command("umount", "-l", mnt).Run()
		}
	})
	return d
}

// Freeze makes the disk hang until Thaw, or until the end of the test:
// its cleanup, which runs before those registered earlier (the cluster
// whose members write to the disk), thaws it. It also thaws itself after
// maxFrozen at the latest, so that a test stuck on it (a member's close
// waiting for a write, say) ends before the test binary's timeout kills
// the process and leaves the mount frozen.
func (d *Disk) Freeze() {
	d.t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.frozen {
		return
	}
	runCmd(d.t, "fsfreeze", "--freeze", d.Dir)
	d.frozen = true
	safety := time.AfterFunc(maxFrozen, d.Thaw)
	d.t.Cleanup(func() {
		safety.Stop()
		d.Thaw()
	})
}

// maxFrozen bounds how long a Disk stays frozen.
const maxFrozen = 2 * time.Minute

// Thaw makes a frozen disk answer again; what waited goes on.
func (d *Disk) Thaw() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.frozen {
		return
	}
	if out, err := exec.Command("fsfreeze", "--unfreeze", d.Dir).CombinedOutput(); err != nil {
		d.t.Errorf("testenv: fsfreeze --unfreeze %s: %v: %s", d.Dir, err, out)
		return
	}
	d.frozen = false
}

// Fill takes every free block of the disk (root's reserve too) with a
// file, so that a write needing a new block fails with ENOSPC; Unfill
// frees them.
func (d *Disk) Fill() {
	d.t.Helper()
	f, err := os.Create(filepath.Join(d.Dir, fillFile))
	if err != nil {
		d.t.Fatal(err)
	}
	defer f.Close()
	var st syscall.Statfs_t
	if err := syscall.Statfs(d.Dir, &st); err != nil {
		d.t.Fatal(err)
	}
	// What the allocation leaves (blocks its own extent tree needs) the
	// writes after it take.
	syscall.Fallocate(int(f.Fd()), 0, 0, int64(st.Bfree)*st.Bsize)
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		d.t.Fatal(err)
	}
	block := make([]byte, 4096)
	for {
		if _, err := f.Write(block); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				d.t.Fatal(err)
			}
			return
		}
	}
}

// Unfill removes what Fill wrote.
func (d *Disk) Unfill() {
	d.t.Helper()
	if err := os.Remove(filepath.Join(d.Dir, fillFile)); err != nil {
		d.t.Fatal(err)
	}
}

const fillFile = "fill"
