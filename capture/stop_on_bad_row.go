//go:build tidemark_stop_on_bad_row

package capture

// Built only with the tag tidemark_stop_on_bad_row, for the chaos harness's
// test of the fault bad-version-row (lab/chaos): capture stops on a row it
// cannot decode, as it did before no row could stop it.
func init() { stopOnBadRow = true }
