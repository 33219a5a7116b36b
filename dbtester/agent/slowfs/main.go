// dbtester-slowfs: a FUSE passthrough over a database member's data directory
// whose fsync can be made slow while the member runs.
//
// The agent starts it before the member, with the member's data directory as
// the mount point and a directory beside it as the backing store:
//
//	dbtester-slowfs BACKING MOUNTPOINT
//
// It prints "mounted" once the layer serves, then reads commands on stdin,
// one per line, and answers each with one line:
//
//	fsync_ms N   every fsync and fdatasync of a file waits N ms longer -> "ok"
//	stats        -> "fsyncs N delayed_ms M"
//
// At the end of stdin (the agent closed it, or the agent died) and on SIGTERM
// or SIGINT it unmounts and exits, so the layer never outlives its agent.
// Reads and writes go to the backing files (the kernel's passthrough where it
// has one), so with no delay the layer costs an fsync's round trip to this
// process and lookups.
package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// delay is what the layer adds; read on every fsync, set by the agent.
type delay struct {
	fsyncNanos atomic.Int64
	fsyncs     atomic.Int64
	delayed    atomic.Int64
}

func (d *delay) wait() {
	d.fsyncs.Add(1)
	if n := d.fsyncNanos.Load(); n > 0 {
		d.delayed.Add(n)
		time.Sleep(time.Duration(n))
	}
}

// node is a loopback node whose fsync waits first.
type node struct {
	fs.LoopbackNode
	delay *delay
}

var _ fs.NodeFsyncer = (*node)(nil)

func (n *node) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno {
	n.delay.wait()
	if syncer, ok := f.(fs.FileFsyncer); ok {
		return syncer.Fsync(ctx, flags)
	}
	return syscall.ENOTSUP
}

// Getxattr answers that the layer keeps no extended attributes, so the
// kernel stops asking: otherwise it asks for security.capability before
// every write, a round trip to this process that a passthrough write does
// not need (closed-loop etcd writes kept 0.73 of their throughput without
// the layer while it asked, 0.81 once it stopped: benchmarks/slowdisk_cost.py).
func (n *node) Getxattr(context.Context, string, []byte) (uint32, syscall.Errno) {
	return 0, syscall.ENOSYS
}

var _ fs.NodeGetxattrer = (*node)(nil)

func mount(backing, mountpoint string, d *delay) (*fuse.Server, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(backing, &st); err != nil {
		return nil, fmt.Errorf("backing directory %s: %w", backing, err)
	}
	root := &fs.LoopbackRoot{Path: backing, Dev: uint64(st.Dev)}
	root.NewNode = func(r *fs.LoopbackRoot, _ *fs.Inode, _ string, _ *syscall.Stat_t) fs.InodeEmbedder {
		return &node{LoopbackNode: fs.LoopbackNode{RootData: r}, delay: d}
	}
	root.RootNode = root.NewNode(root, nil, "", &st)
	second := time.Second
	options := &fs.Options{
		EntryTimeout: &second,
		AttrTimeout:  &second,
		MountOptions: fuse.MountOptions{
			FsName:      "dbtester-slowfs",
			Name:        "dbtester-slowfs",
			DirectMount: true,
			// the member may run as another user than the layer
			AllowOther: os.Geteuid() == 0,
		},
	}
	return fs.Mount(mountpoint, root.RootNode, options)
}

// unmount detaches the layer even while files are open in it (the member
// should be gone by then; if it is not, it loses its files, not the host).
func unmount(server *fuse.Server, mountpoint string) {
	if err := server.Unmount(); err != nil {
		if err := syscall.Unmount(mountpoint, syscall.MNT_DETACH); err != nil {
			fmt.Fprintf(os.Stderr, "dbtester-slowfs: cannot unmount %s: %v\n", mountpoint, err)
		}
	}
}

func answer(line string, d *delay) string {
	fields := strings.Fields(line)
	switch {
	case len(fields) == 2 && fields[0] == "fsync_ms":
		ms, err := strconv.ParseFloat(fields[1], 64)
		if err != nil || ms < 0 || ms > 60_000 {
			return "error fsync_ms takes 0 to 60000"
		}
		d.fsyncNanos.Store(int64(ms * 1e6))
		return "ok"
	case len(fields) == 1 && fields[0] == "stats":
		return fmt.Sprintf("fsyncs %d delayed_ms %d", d.fsyncs.Load(), d.delayed.Load()/1e6)
	}
	return "error unknown command (fsync_ms N, stats)"
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: dbtester-slowfs BACKING MOUNTPOINT")
		os.Exit(2)
	}
	mountpoint := os.Args[2]
	d := &delay{}
	server, err := mount(os.Args[1], mountpoint, d)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dbtester-slowfs: cannot mount %s: %v\n", mountpoint, err)
		os.Exit(1)
	}
	// the first of a signal and the end of stdin ends it
	done := make(chan struct{})
	var ending sync.Once
	end := func() { ending.Do(func() { close(done) }) }
	go func() {
		signals := make(chan os.Signal, 1)
		signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
		<-signals
		end()
	}()
	go func() {
		lines := bufio.NewScanner(os.Stdin)
		fmt.Println("mounted")
		for lines.Scan() {
			fmt.Println(answer(lines.Text(), d))
		}
		end()
	}()
	<-done
	unmount(server, mountpoint)
}
