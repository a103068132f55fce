package debuginfo_test

import (
	"fmt"
	"os"

	"github.com/probekit/probekit/debuginfo"
)

// A stripped program finds its debug file through its .gnu_debuglink,
// beside it; the debug file's DWARF sections are read decompressed.
func ExampleFind() {
	const path = "../testdata/debuginfo/bin/dbg_v5"
	obj, err := os.Open(path)
	if err != nil {
		panic(err)
	}
	defer obj.Close()
	d, err := debuginfo.Find(obj, path, &debuginfo.Options{Offline: true})
	if err != nil {
		panic(err)
	}
	defer d.Close()
	info, err := d.ReadSection(".debug_info", 64<<20)
	if err != nil {
		panic(err)
	}
	id, _ := debuginfo.BuildID(obj)
	fmt.Println(d.Source, len(info) > 0, len(id))
	// Output: debuglink true 20
}
