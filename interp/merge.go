package interp

// PartKind says what one Part of a merged stack is.
type PartKind uint8

const (
	// PartNative is native frame Index of the native stack.
	PartNative PartKind = iota
	// PartInterp is interpreted frame Index of the Raw frames.
	PartInterp
	// PartInterpCut marks where the interpreted part was cut (its walk
	// kept no more frames: its depth limit); Index is -1.
	PartInterpCut
)

// Part is one frame of a merged stack: a native frame or an
// interpreted one, by its index in the stack Merge was given, or a
// marker.
type Part struct {
	Kind  PartKind
	Index int
}

// Merge appends to dst the order of a stack that holds both the native
// frames (runtime addresses, innermost first: the instruction pointer,
// then return addresses, as bpf.Stack) and the interpreted frames raws
// (innermost first, as the BPF walk read them) of one thread, and
// returns it with how many interpreted frames could not be placed.
//
// eval are the address ranges [start, end) of the interpreter's
// eval-loop functions. A native frame in one of them (a return address
// is looked up at the call, address - 1) runs the next run of
// interpreted frames: the frames up to and including the first with
// FlagRunEnd. That run is put directly before (inside of) the eval-loop
// frame, innermost first, and the eval-loop frame itself stays after
// it, so that a native-only view of the stack is unchanged and a C
// function called from Python called from C reads C → Python → eval
// loop → C. No native frame is ever dropped.
//
// A frame with FlagBad ends the interpreted part: it is placed (the
// caller names it as unreadable) and no frame after it is. Interpreted
// frames left when the native frames end (the native walk ended early,
// or an eval-loop frame was not recognised) are appended after the last
// native frame; leftover counts them, so that the caller can mark the
// stack. cut says the interpreted walk kept no more frames (its depth
// limit): a PartInterpCut marker follows the last interpreted frame
// placed.
func Merge(dst []Part, native []uint64, raws []Raw, eval [][2]uint64, cut bool) (parts []Part, leftover int) {
	// The frames placed at all: up to and including the first bad one.
	end := len(raws)
	for i, r := range raws {
		if r.Flags&FlagBad != 0 {
			end = i + 1
			cut = false // the bad frame says why the part ends
			break
		}
	}
	j := 0
	emitRun := func() {
		for j < end {
			r := raws[j]
			dst = append(dst, Part{Kind: PartInterp, Index: j})
			j++
			if r.Flags&(FlagRunEnd|FlagBad) != 0 {
				break
			}
		}
		if j == end && cut {
			dst = append(dst, Part{Kind: PartInterpCut, Index: -1})
			cut = false
		}
	}
	for i, pc := range native {
		look := pc
		if i > 0 && look > 0 {
			look-- // in the call instruction
		}
		if j < end && inRanges(look, eval) {
			emitRun()
		}
		dst = append(dst, Part{Kind: PartNative, Index: i})
	}
	leftover = end - j
	for j < end {
		emitRun()
	}
	return dst, leftover
}

func inRanges(addr uint64, ranges [][2]uint64) bool {
	for _, r := range ranges {
		if addr >= r[0] && addr < r[1] {
			return true
		}
	}
	return false
}

// DisplayName is how a merged stack shows f: its function, or
// "<RUNTIME: unreadable: WHY>" for a frame that could not be read or
// named.
func (f Frame) DisplayName() string {
	if f.Unreadable != "" || f.Func == "" {
		why := f.Unreadable
		if why == "" {
			why = "no name"
		}
		return "<" + runtimeName(f.Runtime) + ": unreadable: " + why + ">"
	}
	return f.Func
}

// CutName is the name of a merged stack's PartInterpCut marker.
func CutName(runtime string) string {
	return "<" + runtimeName(runtime) + ": more frames than the walk keeps>"
}

func runtimeName(r string) string {
	if r == "" {
		return "interpreter"
	}
	return r
}
