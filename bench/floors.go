package bench

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// The floors under any keeper's latency on a machine: a write is durable
// no sooner than the disk syncs it, and a request answers no sooner than a
// loopback round trip.

// fsyncFileBlocks is the size, in 4 KiB blocks, of the file FsyncLatency
// rewrites: written and synced once first, so that the timed writes
// allocate nothing and fdatasync flushes data only.
const fsyncFileBlocks = 1024

// FsyncLatency measures n rounds of one 4 KiB write and fdatasync to a
// file in dir (the disk the servers keep their data on); the Result's Op
// is "fsync" and its latencies are per round.
func FsyncLatency(dir string, n int) (Result, error) {
	f, err := os.CreateTemp(dir, "fsync-floor-")
	if err != nil {
		return Result{}, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if _, err := f.Write(make([]byte, fsyncFileBlocks*4096)); err != nil {
		return Result{}, err
	}
	if err := f.Sync(); err != nil {
		return Result{}, err
	}
	block := make([]byte, 4096)
	samples := make([]time.Duration, 0, n)
	start := time.Now()
	for i := range n {
		block[0] = byte(i)
		t0 := time.Now()
		if _, err := f.WriteAt(block, int64(i%fsyncFileBlocks)*4096); err != nil {
			return Result{}, err
		}
		if err := syscall.Fdatasync(int(f.Fd())); err != nil {
			return Result{}, fmt.Errorf("bench: fdatasync %s: %w", filepath.Base(f.Name()), err)
		}
		samples = append(samples, time.Since(t0))
	}
	return summarize(Options{Op: "fsync", Clients: 1}, samples, nil, time.Since(start)), nil
}

// LoopbackRTT measures n round trips of a 64-byte message to a TCP echo
// server on 127.0.0.1 (in this process, on its own goroutine); the
// Result's Op is "loopback".
func LoopbackRTT(n int) (Result, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return Result{}, err
	}
	defer ln.Close()
	echoed := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			echoed <- err
			return
		}
		defer c.Close()
		_, err = io.Copy(c, c)
		echoed <- err
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return Result{}, err
	}
	msg, reply := make([]byte, 64), make([]byte, 64)
	samples := make([]time.Duration, 0, n)
	start := time.Now()
	for range n {
		t0 := time.Now()
		if _, err := c.Write(msg); err != nil {
			c.Close()
			return Result{}, err
		}
		if _, err := io.ReadFull(c, reply); err != nil {
			c.Close()
			return Result{}, err
		}
		samples = append(samples, time.Since(t0))
	}
	elapsed := time.Since(start)
	c.Close()
	if err := <-echoed; err != nil && !errors.Is(err, net.ErrClosed) {
		return Result{}, err
	}
	return summarize(Options{Op: "loopback", Clients: 1}, samples, nil, elapsed), nil
}
