package status

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/catalog"
	"github.com/tidemark/tidemark/schema"
)

// sources makes the watermark's sources part of the verdict (the s<N>
// fields, cache/source.go): partitions set by the markers of more than one
// source mean two deployments' captures write to this topic (at least AT
// RISK); with --pg, a partition set by a source of another server or
// database than the one given is one the serve processes of that database
// do not trust: they extend nothing (BREACHED).
func (rep *Report) sources(wm cache.Watermark) {
	var seen []string
	for p := range int32(wm.Partitions) {
		if s, ok := wm.Sources[p]; ok && !slices.Contains(seen, s) {
			seen = append(seen, s)
		}
	}
	rep.WatermarkSources = seen
	var foreign []string
	if rep.Source != "" {
		for _, s := range seen {
			if !strings.HasPrefix(s, rep.Source+"/") {
				foreign = append(foreign, s)
			}
		}
	}
	switch {
	case len(foreign) > 0:
		rep.Verdict = Breached
		rep.Reason += fmt.Sprintf("; partition watermarks set by resolved markers of %s, not of this source (%s): another deployment's capture writes to this topic, and serve processes of this source extend nothing by the watermark",
			strings.Join(foreign, ", "), rep.Source)
	case len(seen) > 1:
		if rep.Verdict == OK {
			rep.Verdict = AtRisk
		}
		rep.Reason += fmt.Sprintf("; partition watermarks set by resolved markers of %d sources (%s): two deployments' captures write to this topic (give each its own topic and slot)",
			len(seen), strings.Join(seen, ", "))
	}
}

// readSourceName reads the start of the name capture gives its markers
// (catalog.SourceDatabase): the server and database --pg names.
func readSourceName(ctx context.Context, conn *pgx.Conn) (string, error) {
	sysid, database, err := catalog.SourceDatabase(ctx, conn)
	if err != nil {
		return "", fmt.Errorf("status: %w", err)
	}
	return schema.SourceDatabase(sysid, database), nil
}
