package symbolize

import (
	"os"
	"syscall"

	"github.com/probekit/probekit/procmaps"
)

// fileID is the identity of an opened file (st_dev, st_ino).
func fileID(st os.FileInfo) procmaps.FileID {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return procmaps.FileID{Dev: uint64(s.Dev), Inode: s.Ino}
	}
	return procmaps.FileID{}
}
