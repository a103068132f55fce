package usdt

// The plan phase of an attach: a spec per location, deduplicated, written
// to spec map slots shared with other attaches of the same spec.

import (
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/probekit/probekit/internal/safeelf"
)

// planned is one location to attach, with its spec.
type planned struct {
	obj    *object
	probe  *Probe
	loc    *Location
	specID uint32 // the slot of __bpf_usdt_specs holding spec
	spec   []byte // the encoded spec
	// refCtr is the semaphore's file offset for the kernel, 0 for none.
	refCtr uint64
	// ip is the location's runtime address (IP-map path only).
	ip uint64
}

func (p *planned) String() string {
	return fmt.Sprintf("USDT %s:%s at %#x in %s", p.probe.Provider, p.probe.Name, p.loc.Address, p.obj.name)
}

// plan builds and encodes the spec of every location of objs, and writes
// the distinct specs to slots it allocates in h.
func (a *Attacher) plan(h *holding, objs []object, opts *Options, userSema bool) ([]planned, error) {
	var sites []planned
	var encoded [][]byte
	index := map[string]int{}
	for oi := range objs {
		o := &objs[oi]
		sym := symbolsFor(o)
		for _, p := range o.probes {
			for li := range p.Locations {
				loc := &p.Locations[li]
				if loc.SiteErr != nil {
					return nil, loc.SiteErr
				}
				s := planned{obj: o, probe: p, loc: loc}
				cookie := opts.Cookie
				if opts.LocationCookie != nil {
					cookie = opts.LocationCookie(p, li)
				}
				spec, argErrs := a.layout.siteSpec(o, loc, sym, cookie)
				for _, e := range argErrs {
					h.warnings = append(h.warnings, fmt.Errorf("%v: %w", &s, e))
				}
				if loc.ArgsErr != nil {
					h.warnings = append(h.warnings, fmt.Errorf("%v: arguments unreadable: %w", &s, loc.ArgsErr))
				}
				b, err := a.layout.encode(&spec)
				if err != nil {
					return nil, fmt.Errorf("%v: %w", &s, err)
				}
				if err := a.checkSame(&spec, b); err != nil {
					return nil, fmt.Errorf("%v: %w", &s, err)
				}
				k, ok := index[string(b)]
				if !ok {
					k = len(encoded)
					index[string(b)] = k
					encoded = append(encoded, b)
				}
				s.specID, s.spec = uint32(k), encoded[k]
				if loc.Semaphore != 0 && !userSema {
					s.refCtr = loc.SemaphoreOffset
				}
				sites = append(sites, s)
			}
		}
	}

	// Slots are shared with every attach of an identical spec.
	ids, err := a.ids.acquire(encoded, func(id uint32, b []byte) error {
		if err := a.specs.Update(id, b, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("write spec %d to %s: %w", id, specsMapName, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	h.specIDs = ids
	for i := range sites {
		sites[i].specID = ids[sites[i].specID]
	}
	return sites, nil
}

// symbolsFor returns a symbol resolver for PC-relative arguments of o's
// probes, reading the symbol tables from o's descriptor only when an
// argument needs them.
func symbolsFor(o *object) func(string) (uint64, bool) {
	var resolve func(string) (uint64, bool)
	return func(name string) (uint64, bool) {
		if resolve == nil {
			resolve = func(string) (uint64, bool) { return 0, false }
			if f, err := safeelf.NewFile(o.fd); err == nil {
				resolve = symbolResolver(f)
			}
		}
		return resolve(name)
	}
}

// siteSpec is the spec of location loc of o, fitted to the layout, with
// what could not be expressed (the arguments left unavailable).
func (l *specLayout) siteSpec(o *object, loc *Location, sym func(string) (uint64, bool), cookie uint64) (bpfSpec, []error) {
	spec, errs := buildSpec(o.file.Machine, loc.Address, loc.Args, sym, cookie)
	return spec, append(errs, l.fit(&spec)...)
}
