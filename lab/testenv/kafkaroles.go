package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tidemark/tidemark/internal/kafkaconn"
	"github.com/tidemark/tidemark/internal/tlsfiles"
)

// Kafka roles: who a tidemark process is to the brokers' ACLs.
const (
	RoleCapture = "capture"
	RoleApply   = "apply"
	RoleReplay  = "replay"
	RoleStatus  = "status"
)

// KafkaACL is one allowed operation on one resource: the one named Name,
// or with Prefixed every resource whose name starts with Name.
type KafkaACL struct {
	Resource kmsg.ACLResourceType // topic, group or cluster
	Name     string
	Op       kmsg.ACLOperation
	Prefixed bool
}

func (a KafkaACL) String() string {
	if a.Prefixed {
		return fmt.Sprintf("%s %s* %s", strings.ToLower(a.Resource.String()), a.Name, a.Op)
	}
	return fmt.Sprintf("%s %s %s", strings.ToLower(a.Resource.String()), a.Name, a.Op)
}

// KafkaRoleACLs is the README's table of the ACLs each role needs, for a
// topic and group made beforehand (the Create rows are left out): the least
// a role works with. Kafka lets Read and Write imply Describe, so Describe
// appears only where neither is granted.
func KafkaRoleACLs(role, topic, group string) []KafkaACL {
	t := func(name string, op kmsg.ACLOperation) KafkaACL {
		return KafkaACL{Resource: kmsg.ACLResourceTypeTopic, Name: name, Op: op}
	}
	g := func(op kmsg.ACLOperation) KafkaACL {
		return KafkaACL{Resource: kmsg.ACLResourceTypeGroup, Name: group, Op: op}
	}
	dlq, state := topic+".dlq", topic+".capture"
	switch role {
	case RoleCapture:
		return []KafkaACL{t(topic, kmsg.ACLOperationWrite), t(topic, kmsg.ACLOperationDescribeConfigs),
			t(state, kmsg.ACLOperationRead), t(state, kmsg.ACLOperationWrite),
			t(dlq, kmsg.ACLOperationDescribe), g(kmsg.ACLOperationDescribe)} // the last two: the status page
	case RoleApply:
		return []KafkaACL{t(topic, kmsg.ACLOperationRead), t(dlq, kmsg.ACLOperationWrite), g(kmsg.ACLOperationRead)}
	case RoleReplay:
		return []KafkaACL{t(topic, kmsg.ACLOperationRead)}
	case RoleStatus:
		return []KafkaACL{t(topic, kmsg.ACLOperationDescribe), t(dlq, kmsg.ACLOperationDescribe), g(kmsg.ACLOperationDescribe)}
	}
	panic("testenv: unknown Kafka role " + role)
}

// KafkaUser makes a fresh SCRAM-SHA-512 user on the real cluster's SASL_SSL
// listener holding exactly acls, and returns how to connect as it: TLS with
// the test-made CA and client certificate, the password only as a file.
func (k *Kafka) KafkaUser(t testing.TB, acls []KafkaACL) kafkaconn.Config {
	t.Helper()
	if k.Real == nil || len(k.SASL) == 0 {
		t.Fatalf("testenv: Kafka users need the real cluster's SASL_SSL listener (%s=real)", KafkaEnv)
	}
	var b [6]byte
	rand.Read(b[:])
	user, pw := "u-"+hex.EncodeToString(b[:]), hex.EncodeToString(b[:])+"-pw"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := k.Real.AddSCRAMUser(ctx, user, pw); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	k.Grant(t, "User:"+user, acls)
	pwFile := filepath.Join(t.TempDir(), user+"-password")
	if err := os.WriteFile(pwFile, []byte(pw+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return kafkaconn.Config{TLS: tlsfiles.Config{CAFile: k.Certs.CA, CertFile: k.Certs.ClientCert, KeyFile: k.Certs.ClientKey},
		SASLMechanism: kafkaconn.ScramSHA512, SASLUser: user, SASLPasswordFile: pwFile}
}

// Grant gives principal ("User:name") exactly acls on the real cluster, and
// waits until every broker enforces them.
func (k *Kafka) Grant(t testing.TB, principal string, acls []KafkaACL) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	adm, err := newAdmin(k.Brokers)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	defer adm.Close()
	for _, a := range acls {
		pattern := kadm.ACLPatternLiteral
		if a.Prefixed {
			pattern = kadm.ACLPatternPrefixed
		}
		bld := kadm.NewACLs().Allow(principal).ResourcePatternType(pattern).Operations(a.Op)
		switch a.Resource {
		case kmsg.ACLResourceTypeTopic:
			bld.Topics(a.Name)
		case kmsg.ACLResourceTypeGroup:
			bld.Groups(a.Name)
		case kmsg.ACLResourceTypeCluster:
			bld.Clusters()
		}
		res, err := adm.CreateACLs(ctx, bld)
		if err == nil {
			for _, r := range res {
				if r.Err != nil {
					err = r.Err
				}
			}
		}
		if err != nil {
			t.Fatalf("testenv: grant %s to %s: %v", a, principal, err)
		}
	}
	if err := k.waitACLs(ctx, principal, len(acls)); err != nil {
		t.Fatalf("testenv: %v", err)
	}
}

// RoleUser is KafkaUser with the role's ACLs for topic and group.
func (k *Kafka) RoleUser(t testing.TB, role, topic, group string) kafkaconn.Config {
	t.Helper()
	return k.KafkaUser(t, KafkaRoleACLs(role, topic, group))
}

// waitACLs waits until every broker's authorizer holds the principal's n
// ACLs: they reach the brokers through the metadata log, a moment after
// the controller took them.
func (k *Kafka) waitACLs(ctx context.Context, principal string, n int) error {
	cl, err := k.Real.Client()
	if err != nil {
		return err
	}
	defer cl.Close()
	var last string
	for {
		ok := true
		for _, node := range k.Real.Nodes {
			req := kmsg.NewPtrDescribeACLsRequest()
			req.ResourceType, req.ResourcePatternType = kmsg.ACLResourceTypeAny, kmsg.ACLResourcePatternTypeAny
			req.Principal = kmsg.StringPtr(principal)
			req.Operation, req.PermissionType = kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
			resp, err := req.RequestWith(ctx, cl.Broker(int(node.ID)))
			got := 0
			if err == nil {
				for _, r := range resp.Resources {
					got += len(r.ACLs)
				}
			}
			if err != nil || got < n {
				ok, last = false, fmt.Sprintf("node %d: %d of %d ACLs, %v", node.ID, got, n, err)
				break
			}
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("ACLs of %s not on every broker: %s", principal, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
