package record_test

import (
	"fmt"
	"log"
	"time"

	"github.com/probekit/probekit/record"
	"github.com/probekit/probekit/uprobe"
)

// The latency of libc's fsync, entry to return, per file descriptor (its
// first argument), for ten seconds: histograms of nanoseconds, built in
// the kernel. (It needs root; compiled, not run.)
func Example_latency() {
	spec, err := record.Spec()
	if err != nil {
		log.Fatal(err)
	}
	if err := uprobe.Prepare(spec); err != nil {
		log.Fatal(err)
	}
	if err := record.SetMode(spec, record.ModeLatency, 0); err != nil {
		log.Fatal(err)
	}
	if err := record.SetKeys(spec, []record.KeyPart{{Kind: record.KeyArg, Val: 0}}); err != nil {
		log.Fatal(err)
	}
	objs, err := record.LoadSpec(spec, record.FuncProgram)
	if err != nil {
		log.Fatal(err)
	}
	defer objs.Close()
	bin, err := uprobe.Open("libc.so.6")
	if err != nil {
		log.Fatal(err)
	}
	defer bin.Close()
	start, err := record.FuncCookie(0, record.RegsC, record.KindUprobe, 0)
	if err != nil {
		log.Fatal(err)
	}
	end, err := record.FuncCookie(1, record.RegsRet, record.KindUretprobe, 0)
	if err != nil {
		log.Fatal(err)
	}
	in, err := bin.Entry("fsync", objs.FuncProgram, &uprobe.Options{Cookie: start})
	if err != nil {
		log.Fatal(err)
	}
	defer in.Close()
	out, err := bin.Return("fsync", objs.FuncProgram, &uprobe.Options{Cookie: end | record.LatencyEnd})
	if err != nil {
		log.Fatal(err)
	}
	defer out.Close()

	time.Sleep(10 * time.Second)
	hists, err := objs.KeyedHistograms()
	if err != nil {
		log.Fatal(err)
	}
	for _, kh := range hists {
		for b, n := range kh.Hist {
			if n > 0 {
				low, high := record.BucketRange(b)
				fmt.Printf("fd %d: %d calls of %d to %d ns\n", kh.Key.Nums[0], n, low, high)
			}
		}
	}
	lost, err := objs.LatencyLost()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d returns without an entry seen\n", lost.NoStart)
}
