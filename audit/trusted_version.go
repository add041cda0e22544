//go:build tidemark_trust_version

package audit

// Built only with the tag tidemark_trust_version, for the chaos harness's
// test of the fault unbumped-write (lab/chaos): the auditor compares
// versions alone, as before it compared content.
func init() { compareContent = false }
