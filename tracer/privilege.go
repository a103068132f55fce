package tracer

import "github.com/probekit/probekit/internal/privilege"

// privileges are the works of the privilege table that cfg's trace does:
// loading and attaching always; reading the process when it is another
// user's; ptrace when following a running process or launching a
// command; reading every user's processes and objects for a host-wide
// glob or "*" target (without them, other users' processes would be
// missed without a word).
func (cfg *Config) privileges() []privilege.Work {
	works := []privilege.Work{privilege.LoadBPF, privilege.LockMemory}
	if cfg.Process != nil {
		works = append(works, privilege.OfProcess(cfg.Process.PID)...)
		if cfg.Follow {
			works = append(works, privilege.AttachRunning)
		}
	}
	if len(cfg.Command) > 0 {
		works = append(works, privilege.LaunchTraced)
	}
	if cfg.Process == nil && len(cfg.Command) == 0 && followSelectors(cfg) {
		works = append(works, privilege.OtherUser, privilege.UnreadableFile)
	}
	return works
}
