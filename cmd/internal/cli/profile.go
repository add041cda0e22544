package cli

import (
	"fmt"
	"os"
	"runtime/pprof"
	"runtime/trace"
)

// profileEnv names a file to write this process's CPU profile to, from start
// to exit, and traceEnv one for its execution trace (`tidemark-lab bench e2e
// --profile` and `--trace` set them for the stages it runs; read them with
// `go tool pprof -top` and `go tool trace`).
const (
	profileEnv = "TIDEMARK_CPU_PROFILE"
	traceEnv   = "TIDEMARK_TRACE"
)

// startProfile starts the CPU profile and the execution trace that the
// environment asks for; the returned func stops them and closes the files.
func startProfile() (func(), error) {
	var stops []func()
	stop := func() {
		for _, s := range stops {
			s()
		}
	}
	if path := os.Getenv(profileEnv); path != "" {
		f, err := os.Create(path)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", profileEnv, err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: %w", profileEnv, err)
		}
		stops = append(stops, func() { pprof.StopCPUProfile(); f.Close() })
	}
	if path := os.Getenv(traceEnv); path != "" {
		f, err := os.Create(path)
		if err == nil {
			if err = trace.Start(f); err != nil {
				f.Close()
			}
		}
		if err != nil {
			stop()
			return nil, fmt.Errorf("%s: %w", traceEnv, err)
		}
		stops = append(stops, func() { trace.Stop(); f.Close() })
	}
	return stop, nil
}
