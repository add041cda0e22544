package api

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tidemark/tidemark/reader"
)

// The management list (GET /v1/catalog/items): a merchant's admin page pages
// through its own items by (updated_at, item_id), the order of the table's
// (tenant, updated_at, item) index. It reads the source, never the cache: an
// admin page must see its own writes at once, so it is metered as a
// read-your-writes read (one token per page) and answers 503 with
// Retry-After when that class is spent.

const (
	listDefaultLimit = 100
	listMaxLimit     = 1000
)

type listItemJSON struct {
	ItemID    string          `json:"item_id"`
	Version   int64           `json:"version"`
	Deleted   bool            `json:"deleted"`
	UpdatedAt time.Time       `json:"updated_at"`
	Display   json.RawMessage `json:"display"`
}

type listJSON struct {
	Items      []listItemJSON `json:"items"`
	NextCursor string         `json:"next_cursor,omitempty"`
}

// listCursor is where a page ends: the (updated_at, item_id) of its last row.
type listCursor struct {
	updated time.Time
	item    string
}

func (c listCursor) String() string {
	return base64.RawURLEncoding.EncodeToString([]byte(c.updated.UTC().Format(time.RFC3339Nano) + "\n" + c.item))
}

func parseCursor(s string) (listCursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return listCursor{}, errors.New("cursor is not one this API returned")
	}
	ts, item, ok := strings.Cut(string(b), "\n")
	t, terr := time.Parse(time.RFC3339Nano, ts)
	if !ok || terr != nil {
		return listCursor{}, errors.New("cursor is not one this API returned")
	}
	return listCursor{updated: t, item: item}, nil
}

func (s *Server) listItems(w http.ResponseWriter, r *http.Request, tenant string) {
	if s.cfg.Table.UpdatedAtColumn == "" {
		writeError(w, http.StatusNotImplemented, "no_list", "the catalog table has no updated-at column, so it cannot be listed")
		return
	}
	q := r.URL.Query()
	for _, name := range []string{"limit", "updated_after", "cursor"} {
		if _, _, err := queryParam(r, name); err != nil {
			writeError(w, http.StatusBadRequest, "bad_request", err.Error())
			return
		}
	}
	limit := listDefaultLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > listMaxLimit {
			writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("limit must be an integer from 1 to %d", listMaxLimit))
			return
		}
		limit = n
	}
	from := listCursor{updated: time.Unix(0, 0).UTC()}
	if v := q.Get("updated_after"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			writeError(w, http.StatusBadRequest, "bad_request", "updated_after must be an RFC 3339 timestamp")
			return
		}
		// Rows updated at exactly t are after the cursor (t, ""), since
		// every item ID is longer than "": updated_after is inclusive.
		from = listCursor{updated: t}
	}
	if v := q.Get("cursor"); v != "" {
		c, err := parseCursor(v)
		if err != nil {
			writeError(w, http.StatusBadRequest, "bad_request", err.Error())
			return
		}
		from = c
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
	defer cancel()
	release, err := s.rd.Acquire(ctx, reader.ClassReadYourWrites, tenant)
	if err != nil {
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "unavailable", "the catalog source is busy or unavailable; retry later")
		return
	}
	page, err := s.readPage(ctx, tenant, from, limit)
	release()
	if err != nil {
		s.log.Warn("list read failed", "tenant", tenant, "err", err)
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "unavailable", "the catalog source is busy or unavailable; retry later")
		return
	}
	w.Header().Set("Cache-Control", "private, no-store")
	w.Header().Set("Vary", "Authorization")
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(page) // a failed response write: the client is gone
}

// readPage reads at most limit rows after from, in one short read-only
// transaction bounded by the source timeout like every source read.
func (s *Server) readPage(ctx context.Context, tenant string, from listCursor, limit int) (listJSON, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return listJSON{}, fmt.Errorf("api: list: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, "SET TRANSACTION ISOLATION LEVEL READ COMMITTED READ ONLY"); err != nil {
		return listJSON{}, fmt.Errorf("api: list: %w", err)
	}
	if _, err := tx.Exec(ctx, "SELECT set_config('statement_timeout', $1, true)", strconv.FormatInt(s.cfg.SourceTimeout.Milliseconds(), 10)); err != nil {
		return listJSON{}, fmt.Errorf("api: list: %w", err)
	}
	rows, err := tx.Query(ctx, s.listSQL, tenant, from.updated, from.item, limit+1)
	if err != nil {
		return listJSON{}, fmt.Errorf("api: list: %w", err)
	}
	defer rows.Close()
	out := listJSON{Items: []listItemJSON{}}
	for rows.Next() {
		var it listItemJSON
		var display []byte
		if err := rows.Scan(&it.ItemID, &it.Version, &display, &it.Deleted, &it.UpdatedAt); err != nil {
			return listJSON{}, fmt.Errorf("api: list: %w", err)
		}
		if it.Deleted || len(display) == 0 {
			display = []byte("null")
		}
		it.Display = display
		out.Items = append(out.Items, it)
	}
	if err := rows.Err(); err != nil {
		return listJSON{}, fmt.Errorf("api: list: %w", err)
	}
	if len(out.Items) > limit {
		out.Items = out.Items[:limit]
		last := out.Items[limit-1]
		out.NextCursor = listCursor{updated: last.UpdatedAt, item: last.ItemID}.String()
	}
	return out, nil
}
