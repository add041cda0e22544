package main

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// profileEnv names a file to write this process's CPU profile to, from start
// to exit (`tidemark bench e2e --profile` sets it for the stages it runs;
// read it with `go tool pprof -top`).
const profileEnv = "TIDEMARK_CPU_PROFILE"

// startProfile starts the CPU profile when profileEnv is set; the returned
// func stops it and closes the file.
func startProfile() (func(), error) {
	path := os.Getenv(profileEnv)
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", profileEnv, err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", profileEnv, err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
