package localserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// KafkaInfo describes a running cluster to processes that did not start it
// (AttachKafka): every node's addresses and, with SASL, the certificates
// clients present. One cluster can so serve several test binaries.
type KafkaInfo struct {
	Nodes []KafkaNodeInfo `json:"nodes"`
	Certs *Certs          `json:"certs,omitempty"`
}

// KafkaNodeInfo is one node's addresses.
type KafkaNodeInfo struct {
	ID             int32  `json:"id"`
	Addr           string `json:"addr"`
	ControllerAddr string `json:"controller_addr"`
	SASLAddr       string `json:"sasl_addr,omitempty"`
}

// Info describes k; certs are the SASL listener's (KafkaConfig.SASL), or nil.
func (k *Kafka) Info(certs *Certs) KafkaInfo {
	info := KafkaInfo{Certs: certs}
	for _, n := range k.Nodes {
		info.Nodes = append(info.Nodes, KafkaNodeInfo{ID: n.ID, Addr: n.Addr, ControllerAddr: n.ControllerAddr, SASLAddr: n.SASLAddr})
	}
	return info
}

// WriteKafkaInfo writes info to path as JSON, whole or not at all (a reader
// polling for the file never sees half of it).
func WriteKafkaInfo(path string, info KafkaInfo) error {
	b, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".kafka-info-*")
	if err != nil {
		return fmt.Errorf("localserver: kafka info: %w", err)
	}
	_, err = tmp.Write(append(b, '\n'))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("localserver: kafka info: %w", err)
	}
	return nil
}

// ReadKafkaInfo reads what WriteKafkaInfo wrote.
func ReadKafkaInfo(path string) (KafkaInfo, error) {
	var info KafkaInfo
	b, err := os.ReadFile(path)
	if err != nil {
		return info, fmt.Errorf("localserver: kafka info: %w", err)
	}
	if err := json.Unmarshal(b, &info); err != nil {
		return info, fmt.Errorf("localserver: kafka info %s: %w", path, err)
	}
	if len(info.Nodes) == 0 {
		return info, fmt.Errorf("localserver: kafka info %s: no nodes", path)
	}
	for _, n := range info.Nodes {
		if n.ID < 1 || n.Addr == "" {
			return info, fmt.Errorf("localserver: kafka info %s: node %+v without an id or an address", path, n)
		}
	}
	return info, nil
}

// AttachKafka is a cluster another process runs: its nodes answer at the
// recorded addresses, and Stop, Kill, Start and Remove are not this
// process's to call (Running is false; Start fails).
func AttachKafka(info KafkaInfo) *Kafka {
	k := &Kafka{}
	for _, n := range info.Nodes {
		k.Nodes = append(k.Nodes, &KafkaNode{ID: n.ID, Addr: n.Addr, ControllerAddr: n.ControllerAddr, SASLAddr: n.SASLAddr, attached: true})
	}
	return k
}

// errAttached is Start's answer on a node of an attached cluster.
var errAttached = errors.New("localserver: the kafka node belongs to the process that started the cluster")
