package main

// benchCmd groups the benchmarks; each stage's subcommand is wired in its own
// file (bench_<stage>.go).
type benchCmd struct {
	Capture benchCaptureCmd `cmd:"" help:"Capture-to-Kafka rate vs pg_recvlogical on the same WAL; commit-to-produced latency."`
	Cache   benchCacheCmd   `cmd:"" help:"Batched invalidate and lookup latency vs redis-benchmark ceilings."`
	Apply   benchApplyCmd   `cmd:"" help:"Replay throughput into Redis vs pipelined EVALSHA; commit-to-apply latency."`
	Serve   benchServeCmd   `cmd:"" help:"Cache-hit GET throughput and latency with a zipf key set; share of source reads."`
	Reads   benchReadsCmd   `cmd:"" help:"A page of many items through serve: one batch GET against N single GETs; Redis commands per GET of a hot key, replicas off and on."`
	Hotkey  benchHotkeyCmd  `cmd:"" help:"One hot key with L1 off on a Redis Cluster: per-master command rate (max/avg) and p99, replicas off vs on."`
	Hop     benchHopCmd     `cmd:"" help:"One Kafka hop alone with capture's producer settings: produce → acknowledged and → read back, per producer linger."`
	E2E     benchE2ECmd     `cmd:"e2e" name:"e2e" help:"Commit-to-applied latency through capture, apply and the broker as separate processes, vs pg_recvlogical; CPU and RSS per process."`
	Warm    benchWarmCmd    `cmd:"" help:"Kill redis-server under zipf load: time to 90 % of the hit ratio with and without the warmer, source reads vs budget, 503s."`
	Memory  benchMemoryCmd  `cmd:"" help:"Redis bytes per cached entry (INFO memory, MEMORY USAGE) against plain SETs of the same payloads; hot-key replicas and floors apart."`
	Scan    benchScanCmd    `cmd:"" help:"One tenant scans cold ids at its share while another reads its hot set from a full cache: the other's hit ratio with and without admission."`
}
