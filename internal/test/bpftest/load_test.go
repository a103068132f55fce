package bpftest

import (
	"errors"
	"os"
	"regexp"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/probekit/probekit/internal/features"
	"github.com/probekit/probekit/internal/test/testkit"
)

func TestMain(m *testing.M) { os.Exit(testkit.RunWithLeakCheck(m)) }

var processedRE = regexp.MustCompile(`processed (\d+) insns`)

// Every program here loads on the running kernel in both spec-id modes:
// the BPF cookie (Linux 5.15+) and the IP map every kernel has. The
// 12-argument BPF_USDT program (args_macro) is the largest: an argument
// fetch that older verifiers cannot prune goes past their budget of
// 1,000,000 processed instructions there.
func TestProgramsLoad(t *testing.T) {
	testkit.RequireKernel(t)
	haveCookie, err := features.Have(features.Cookie)
	if err != nil {
		t.Fatal(err)
	}
	loads := map[string]func() (*ebpf.CollectionSpec, error){
		"Args": LoadArgs, "ArgsPre17": LoadArgsPre17, "Count": LoadCount,
	}
	for name, load := range loads {
		for _, cookie := range []bool{true, false} {
			mode := "ipmap"
			if cookie {
				mode = "cookie"
			}
			t.Run(name+"/"+mode, func(t *testing.T) {
				if cookie {
					testkit.NeedFeature(t, haveCookie, nil, features.Cookie.Since(), features.Cookie.String())
				}
				spec, err := load()
				if err != nil {
					t.Fatal(err)
				}
				if err := spec.Variables["probekit_usdt_have_cookie"].Set(cookie); err != nil {
					t.Fatal(err)
				}
				for pname := range spec.Programs {
					one := spec.Copy()
					for other := range one.Programs {
						if other != pname {
							delete(one.Programs, other)
						}
					}
					coll, err := ebpf.NewCollectionWithOptions(one, ebpf.CollectionOptions{
						Programs: ebpf.ProgramOptions{LogLevel: ebpf.LogLevelStats},
					})
					if err != nil {
						var ve *ebpf.VerifierError
						if errors.As(err, &ve) {
							// The end of the log: the refusal and the statistics.
							t.Errorf("%s: %v", pname, ve)
						} else {
							t.Errorf("%s: %v", pname, err)
						}
						continue
					}
					if m := processedRE.FindStringSubmatch(coll.Programs[pname].VerifierLog); m != nil {
						t.Logf("%s: %s instructions processed", pname, m[1])
					}
					coll.Close()
				}
			})
		}
	}
}
