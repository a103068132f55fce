package usdt

// What an attach holds besides its uprobes, taken before the uprobes are
// placed and released after they are gone: spec map slots, IP map
// entries, user-space semaphore counts.

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/probekit/probekit/internal/features"
	"github.com/probekit/probekit/procmaps"
	"github.com/probekit/probekit/semaphore"
)

type holding struct {
	attacher   *Attacher
	specIDs    []uint32
	ips        []ipKey
	semaphores []*semaphore.Activation
	warnings   []error
}

// raiseSemaphores increments each distinct semaphore once in proc.
func (h *holding) raiseSemaphores(proc *procmaps.Process, sites []planned) error {
	seen := map[*Location]bool{}
	for _, s := range sites {
		if s.loc.Semaphore == 0 || seen[s.loc] {
			continue
		}
		seen[s.loc] = true
		if s.obj.mapped == nil {
			return fmt.Errorf("USDT %s:%s: pid %d has not mapped %s, so its semaphore cannot be raised from user space",
				s.probe.Provider, s.probe.Name, proc.PID, s.obj.name)
		}
		addr, err := s.obj.semaphoreAddress(s.loc)
		if err != nil {
			return fmt.Errorf("USDT %s:%s semaphore at file offset %#x: %w", s.probe.Provider, s.probe.Name, s.loc.SemaphoreOffset, err)
		}
		act, err := semaphore.Activate(proc, addr)
		if err != nil {
			return fmt.Errorf("USDT %s:%s: %w", s.probe.Provider, s.probe.Name, err)
		}
		h.semaphores = append(h.semaphores, act)
	}
	return nil
}

// mapIPs fills the IP map for kernels without BPF cookies: the BPF side
// looks the spec up by the process and the probe's runtime address
// (pid: the process whose mapping gives it, 0 for none).
func (h *holding) mapIPs(sites []planned, pid int) error {
	a := h.attacher
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := range sites {
		s := &sites[i]
		var k ipKey
		switch {
		case s.obj.file.Type == elf.ET_EXEC:
			// A non-PIE executable runs at its link-time addresses, in
			// every process.
			s.ip = s.loc.Address
			k.IP = s.ip
		case s.obj.mapped != nil:
			addr, err := s.obj.mapped.Address(s.loc.FileOffset, procmaps.Exec)
			if err != nil {
				return fmt.Errorf("USDT %s:%s at file offset %#x: %w", s.probe.Provider, s.probe.Name, s.loc.FileOffset, err)
			}
			s.ip = addr
			k.IP = addr
			if a.ipByProcess {
				k.PID = uint32(pid)
			}
		case pid != 0:
			return fmt.Errorf("USDT %s:%s in %s: pid %d has not mapped the file yet, and without BPF cookies a position-independent file's sites are found by their runtime address in the process (%w)",
				s.probe.Provider, s.probe.Name, s.obj.name, pid, features.Check(features.Cookie))
		default:
			return fmt.Errorf("USDT %s:%s in %s: cannot attach path-wide to a position-independent file without BPF cookies: its sites are found by their runtime address in a process, so the attach needs a PID (%w)",
				s.probe.Provider, s.probe.Name, s.obj.name, features.Check(features.Cookie))
		}
		if e, ok := a.ipRefs[k]; ok {
			if !bytes.Equal(e.spec, s.spec) {
				return fmt.Errorf("USDT %s:%s at %#x with another cookie or spec: %w", s.probe.Provider, s.probe.Name, s.ip, ErrIPCollision)
			}
			e.refs++
		} else {
			if err := a.ipMap.Update(a.mapKey(k), s.specID, ebpf.UpdateNoExist); err != nil {
				if errors.Is(err, ebpf.ErrKeyExist) {
					return fmt.Errorf("USDT %s:%s at %#x: %w", s.probe.Provider, s.probe.Name, s.ip, ErrIPCollision)
				}
				return fmt.Errorf("write %s: %w", ipMapName, err)
			}
			a.ipRefs[k] = &ipEntry{specID: s.specID, spec: s.spec, refs: 1}
		}
		h.ips = append(h.ips, k)
	}
	return nil
}

// release gives back the semaphore counts, IP map entries and spec ids.
// It runs once, after the uprobes are gone (no hit can look up a spec
// being released).
func (h *holding) release() error {
	var errs []error
	for _, s := range h.semaphores {
		if err := s.Release(); err != nil {
			errs = append(errs, err)
		}
	}
	h.semaphores = nil
	a := h.attacher
	a.mu.Lock()
	for _, k := range h.ips {
		e := a.ipRefs[k]
		if e == nil {
			continue
		}
		if e.refs--; e.refs > 0 {
			continue
		}
		delete(a.ipRefs, k)
		if err := a.ipMap.Delete(a.mapKey(k)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, fmt.Errorf("delete pid %d %#x from %s: %w", k.PID, k.IP, ipMapName, err))
		}
	}
	a.mu.Unlock()
	// A shared IP entry names a slot of the same spec bytes (mapIPs
	// refuses others), which every link sharing the entry holds a
	// reference on: the slot outlives the entry. The slots' contents are
	// left as they are: nothing refers to a freed one once the uprobes
	// are gone, and the next attach of another spec overwrites it.
	a.ids.release(h.specIDs)
	h.ips, h.specIDs = nil, nil
	return errors.Join(errs...)
}
