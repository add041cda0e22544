//go:build tidemark_no_group_check

package applier

// Built only with the tag tidemark_no_group_check, for the chaos harness's
// test of the fault rogue-applier (lab/chaos): an applier joins a consumer
// group whose offsets were committed for another namespace, and does not
// bind its namespace's identity record to its group, as before a group was
// one namespace's.
func init() { groupChecks = false }
