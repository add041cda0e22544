// Package broker runs an embedded Kafka broker (kfake) for local multi-process
// runs, `tidemark dev` and manual testing. It is not a production Kafka: it
// has no replication, and its durability is one process's disk.
package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Config of the embedded broker.
type Config struct {
	DataDir    string // persist here ("" = memory only)
	Port       int    // first broker's port; broker i listens on Port+i (0 = random)
	Brokers    int
	Partitions int // partitions of auto-created topics
}

// DefaultConfig is what `tidemark kafka` runs with no flags.
func DefaultConfig() Config {
	return Config{DataDir: ".tidemark/kafka", Port: 9092, Brokers: 1, Partitions: 12}
}

// Validate reports every problem at once, naming the flag.
func (c Config) Validate() error {
	var errs []error
	if c.Port < 0 || c.Port > 65535-c.Brokers {
		errs = append(errs, fmt.Errorf("--port %d is not a usable TCP port", c.Port))
	}
	if c.Brokers < 1 || c.Brokers > 16 {
		errs = append(errs, fmt.Errorf("--brokers %d must be between 1 and 16", c.Brokers))
	}
	if c.Partitions < 1 {
		errs = append(errs, fmt.Errorf("--partitions %d must be at least 1", c.Partitions))
	}
	return errors.Join(errs...)
}

// Broker is a running kfake cluster.
type Broker struct {
	cluster *kfake.Cluster
	log     *slog.Logger
}

// New starts the cluster and listens at once.
func New(cfg Config, log *slog.Logger) (*Broker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	opts := []kfake.Opt{
		kfake.NumBrokers(cfg.Brokers),
		kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(cfg.Partitions),
		// Consumer groups may ask for short sessions: the applier uses 6 s.
		kfake.GroupMinSessionTimeout(time.Second),
	}
	if cfg.Port != 0 {
		ports := make([]int, cfg.Brokers)
		for i := range ports {
			ports[i] = cfg.Port + i
		}
		opts = append(opts, kfake.Ports(ports...))
	}
	if cfg.DataDir != "" {
		opts = append(opts, kfake.DataDir(cfg.DataDir), kfake.SyncWrites())
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("broker: start embedded kafka: %w", err)
	}
	return &Broker{cluster: c, log: log.With("component", "broker")}, nil
}

// Addrs are the brokers' listen addresses (not callable after Close: kfake blocks).
func (b *Broker) Addrs() []string { return b.cluster.ListenAddrs() }

// Run serves until ctx ends, then closes the cluster (flushing its data).
func (b *Broker) Run(ctx context.Context) error {
	b.log.Info("embedded kafka broker running (not for production)", "brokers", strings.Join(b.Addrs(), ","))
	<-ctx.Done()
	b.cluster.Close()
	b.log.Info("embedded kafka broker stopped")
	return nil
}

// Close stops the cluster without waiting for Run.
func (b *Broker) Close() { b.cluster.Close() }
