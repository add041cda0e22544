//go:build tidemark_no_identity

package cache

import "github.com/redis/go-redis/v9"

// Built only with the tag tidemark_no_identity, for the chaos harness's test
// of the fault second-table-reader (lab/chaos): a claim of the namespace's
// identity stores the fields not set yet and never refuses, as before a
// namespace was bound to one deployment.
func init() { claimLua = noIdentityLua }

var noIdentityLua = redis.NewScript(`
for i = 1, #ARGV, 2 do
  redis.call('HSETNX', KEYS[1], ARGV[i], ARGV[i + 1])
end
return {}`)
