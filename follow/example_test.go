package follow_test

import (
	"fmt"
	"os"
	"os/exec"

	"github.com/cilium/ebpf"

	"github.com/probekit/probekit/follow"
	"github.com/probekit/probekit/usdt"
)

// Every Python function entry of a shell and whatever it starts: each
// process is attached before it runs.
func ExampleLaunch() {
	var (
		spec *ebpf.CollectionSpec // a program using usdt.bpf.h, readied by usdt.Prepare
		coll *ebpf.Collection     // loaded from spec
	)
	att, err := usdt.NewAttacher(spec, coll)
	if err != nil {
		panic(err)
	}
	cmd := exec.Command("sh", "-c", "python3 a.py; python3 b.py")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	tree, err := follow.Launch(cmd, []follow.Probe{{
		Target: "/usr/bin/python3.11", Provider: "python", Name: "function__entry",
		Program: coll.Programs["on_entry"],
	}}, &follow.Options{Attacher: att, Notify: func(e follow.Event) { fmt.Println(e) }})
	if err != nil {
		panic(err)
	}
	defer tree.Close()
	<-tree.Exited()
	fmt.Println("sh:", tree.ExitErr())
}

// Every object with a probe python:function__entry in every process of
// the host, now and later, in containers too.
func ExampleWatchHost() {
	var (
		att  *usdt.Attacher
		prog *ebpf.Program
	)
	w, err := follow.WatchHost([]follow.Probe{{
		Target: "*", Provider: "python", Name: "function__entry", Program: prog,
	}}, &follow.Options{Attacher: att})
	if err != nil {
		panic(err)
	}
	defer w.Close()
	// ... read what prog sends ...
}
