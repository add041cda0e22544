package status

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/reader"
)

// SourceReaders is what the source's table of serve processes says: the
// sets of buckets (a pool's, in one Redis) live on it, each admitting
// 1/len(Shares) of the lowest source budget its readers are configured
// with. More than one is two deployments on one source, or one pool on two
// Redis deployments: the budget is kept, split evenly rather than by
// demand.
type SourceReaders struct {
	Shares []reader.SourceShare `json:"shares"`
	// Error: the table could not be read (an older schema, a role without
	// SELECT on it); the rest of the report stands.
	Error string `json:"error,omitempty"`
}

func readSourceReaders(ctx context.Context, conn *pgx.Conn) *SourceReaders {
	shares, err := reader.LiveSourceShares(ctx, conn)
	if err != nil {
		return &SourceReaders{Error: err.Error()}
	}
	return &SourceReaders{Shares: shares}
}

// String is the line status prints.
func (s SourceReaders) String() string {
	if s.Error != "" {
		return "unknown: " + s.Error
	}
	if len(s.Shares) == 0 {
		return "none registered"
	}
	var parts []string
	procs := 0
	for _, sh := range s.Shares {
		parts = append(parts, fmt.Sprintf("pool %s, buckets %s: %s", sh.Pool, sh.Buckets, processes(sh.Processes)))
		procs += sh.Processes
	}
	line := fmt.Sprintf("%s (%s)", processes(procs), strings.Join(parts, "; "))
	if len(s.Shares) > 1 {
		line += fmt.Sprintf("; each set of buckets admits 1/%d of the source budget (give every deployment on this source one --source-pool and one Redis to share it by demand)", len(s.Shares))
	}
	return line
}

func processes(n int) string {
	if n == 1 {
		return "1 serve process"
	}
	return fmt.Sprintf("%d serve processes", n)
}
