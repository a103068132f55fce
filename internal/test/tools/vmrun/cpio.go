package main

import (
	"fmt"
	"io"
)

// cpioWriter writes the "newc" cpio format the kernel unpacks as an
// initramfs (Documentation/driver-api/early-userspace/buffer-format.rst):
// a 110-byte ASCII header, the NUL-terminated name, the data, each padded
// to 4 bytes, and a final entry named "TRAILER!!!".
type cpioWriter struct {
	w    io.Writer
	ino  int
	err  error
	off  int64
	done bool
}

const (
	modeDir  = 0o040000
	modeFile = 0o100000
	modeChar = 0o020000
)

func (c *cpioWriter) pad() {
	if n := (4 - c.off%4) % 4; n > 0 {
		c.write(make([]byte, n))
	}
}

func (c *cpioWriter) write(b []byte) {
	if c.err != nil {
		return
	}
	n, err := c.w.Write(b)
	c.off += int64(n)
	c.err = err
}

func (c *cpioWriter) entry(name string, mode uint32, data []byte, rmajor, rminor int) {
	c.ino++
	nlink := 1
	if mode&0o170000 == modeDir {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, nlink, 0, len(data), 0, 0, rmajor, rminor, len(name)+1, 0)
	c.write([]byte(hdr))
	c.write(append([]byte(name), 0))
	c.pad()
	c.write(data)
	c.pad()
}

// Dir adds a directory (parents must be added first).
func (c *cpioWriter) Dir(name string) { c.entry(name, modeDir|0o755, nil, 0, 0) }

// File adds a regular file.
func (c *cpioWriter) File(name string, perm uint32, data []byte) {
	c.entry(name, modeFile|perm, data, 0, 0)
}

// CharDev adds a character device node.
func (c *cpioWriter) CharDev(name string, major, minor int) {
	c.entry(name, modeChar|0o600, nil, major, minor)
}

// Close writes the trailer.
func (c *cpioWriter) Close() error {
	if !c.done {
		c.done = true
		c.entry("TRAILER!!!", 0, nil, 0, 0)
	}
	return c.err
}
