package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Writes go straight to Postgres in one transaction each. They never touch
// the cache: the change reaches it as an invalidation through the pipeline.

type createRequest struct {
	ItemID  string          `json:"item_id"`
	Display json.RawMessage `json:"display"`
}

type patchRequest struct {
	ExpectedVersion bodyVersion     `json:"expected_version"`
	Display         json.RawMessage `json:"display"`
}

// bodyVersion is a body's expected_version: absent, or an integer.
// encoding/json reads a JSON null into a pointer as absent, which would let
// If-Match decide a request the contract refuses (null is not an integer):
// a null is refused here, so the request is 400 before any precondition.
type bodyVersion struct{ v *int64 }

func (b *bodyVersion) UnmarshalJSON(data []byte) error {
	if string(data) == "null" {
		return errors.New("expected_version must be a positive integer, not null (leave it out to use If-Match alone)")
	}
	var v int64
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	b.v = &v
	return nil
}

// writeOutcome is a write's answer, as stored for idempotent retries.
type writeOutcome struct {
	status int
	body   any
}

var errIdempotencyMismatch = errors.New("api: idempotency key reused with a different request")

const maxIdempotencyKey = 255

func idempotencyKey(r *http.Request, required bool) (string, error) {
	k := r.Header.Get("Idempotency-Key")
	if _, sent := r.Header["Idempotency-Key"]; sent && k == "" {
		return "", errors.New("Idempotency-Key must not be empty")
	}
	if k == "" {
		if required {
			return "", errors.New("the Idempotency-Key header is required")
		}
		return "", nil
	}
	if len(k) > maxIdempotencyKey {
		return "", fmt.Errorf("Idempotency-Key must be at most %d bytes", maxIdempotencyKey)
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return "", errors.New("Idempotency-Key must be printable ASCII without spaces")
		}
	}
	return k, nil
}

// requestHash identifies a write's meaning, so a retry with the same key and
// the same request is recognised and any other request under the key is not.
func requestHash(parts ...[]byte) []byte {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:", len(p))
		h.Write(p)
	}
	return h.Sum(nil)
}

func (s *Server) createItem(w http.ResponseWriter, r *http.Request, tenant string) {
	key, err := idempotencyKey(r, false)
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	var req createRequest
	if err := s.decodeBody(w, r, &req); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	if err := validID("item_id", req.ItemID); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	display, err := validDisplay(req.Display)
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	hash := requestHash([]byte("POST"), []byte(req.ItemID), display)
	s.runWrite(w, r, tenant, req.ItemID, key, hash, func(ctx context.Context, tx pgx.Tx) (writeOutcome, error) {
		tag, err := tx.Exec(ctx, s.writes.Insert, tenant, req.ItemID, display)
		if err != nil {
			return writeOutcome{}, err
		}
		if tag.RowsAffected() == 0 { // IDs are never reused, tombstones included
			var current int64
			if err := tx.QueryRow(ctx, s.writes.Version, tenant, req.ItemID).Scan(&current); err != nil {
				return writeOutcome{}, err
			}
			return conflict(req.ItemID, current, "the item already exists (item IDs are never reused)"), nil
		}
		return writeOutcome{http.StatusCreated, itemBody(req.ItemID, 1, display)}, nil
	})
}

func (s *Server) patchItem(w http.ResponseWriter, r *http.Request, tenant string) {
	id := r.PathValue("id")
	if err := validID("item id", id); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	key, err := idempotencyKey(r, true)
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	var req patchRequest
	if err := s.decodeBody(w, r, &req); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	// A malformed body is 400 before any precondition is judged: a request
	// the schema refuses is never answered 412.
	display, err := validDisplay(req.Display)
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	expected, byIfMatch, err := expectedVersion(r, req.ExpectedVersion.v, tenantTag(tenant))
	if errors.Is(err, errIfMatchTenant) {
		writeError(w, http.StatusPreconditionFailed, "version_conflict", err.Error())
		return
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	hash := requestHash([]byte("PATCH"), []byte(id), []byte(strconv.FormatInt(expected, 10)), display)
	s.runWrite(w, r, tenant, id, key, hash, func(ctx context.Context, tx pgx.Tx) (writeOutcome, error) {
		if o, done, err := s.lockForChange(ctx, tx, tenant, id, expected); done || err != nil {
			return preconditionFailed(o, byIfMatch), err
		}
		var v int64
		err := tx.QueryRow(ctx, s.writes.Update, tenant, id, display).Scan(&v)
		if err != nil {
			return writeOutcome{}, err
		}
		return writeOutcome{http.StatusOK, itemBody(id, v, display)}, nil
	})
}

func (s *Server) deleteItem(w http.ResponseWriter, r *http.Request, tenant string) {
	id := r.PathValue("id")
	if err := validID("item id", id); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	key, err := idempotencyKey(r, false)
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	var fromQuery *int64
	q, given, err := queryParam(r, "expected_version")
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	if given {
		v, err := strconv.ParseInt(q, 10, 64)
		if err != nil || v < 1 {
			writeError(w, http.StatusBadRequest, "bad_request", "expected_version must be a positive integer")
			return
		}
		fromQuery = &v
	}
	expected, byIfMatch, err := expectedVersion(r, fromQuery, tenantTag(tenant))
	if errors.Is(err, errIfMatchTenant) {
		writeError(w, http.StatusPreconditionFailed, "version_conflict", err.Error())
		return
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	hash := requestHash([]byte("DELETE"), []byte(id), []byte(strconv.FormatInt(expected, 10)))
	s.runWrite(w, r, tenant, id, key, hash, func(ctx context.Context, tx pgx.Tx) (writeOutcome, error) {
		if o, done, err := s.lockForChange(ctx, tx, tenant, id, expected); done || err != nil {
			return preconditionFailed(o, byIfMatch), err
		}
		var v int64
		// A tombstone keeps its row and its increasing version, so the
		// pipeline invalidates it like any change and the ID is never reused.
		err := tx.QueryRow(ctx, s.writes.Delete, tenant, id).Scan(&v)
		if err != nil {
			return writeOutcome{}, err
		}
		return writeOutcome{http.StatusOK, itemBody(id, v, nil)}, nil
	})
}

// lockForChange locks the tenant's item row and checks expected_version.
// done is true when the outcome is already decided (404 or 409).
func (s *Server) lockForChange(ctx context.Context, tx pgx.Tx, tenant, id string, expected int64) (writeOutcome, bool, error) {
	var (
		current int64
		deleted bool
	)
	err := tx.QueryRow(ctx, s.writes.Lock, tenant, id).Scan(&current, &deleted)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return writeOutcome{http.StatusNotFound, errorJSON{Detail: "no such item", Code: "not_found"}}, true, nil
	case err != nil:
		return writeOutcome{}, false, err
	case deleted:
		return writeOutcome{http.StatusNotFound, errorJSON{Detail: "the item is deleted", Code: "deleted", ItemID: id, CurrentVersion: &current}}, true, nil
	case current != expected:
		return conflict(id, current, "expected_version does not match the current version"), true, nil
	}
	return writeOutcome{}, false, nil
}

func conflict(id string, current int64, msg string) writeOutcome {
	return writeOutcome{http.StatusConflict, errorJSON{Detail: msg, Code: "version_conflict", ItemID: id, CurrentVersion: &current}}
}

// runWrite runs do in one read-committed transaction and, with an
// Idempotency-Key, stores its answer by (tenant, key) in the same
// transaction: a retry gets the stored answer, another request under the key
// gets 422.
func (s *Server) runWrite(w http.ResponseWriter, r *http.Request, tenant, id, key string, hash []byte,
	do func(context.Context, pgx.Tx) (writeOutcome, error)) {
	ctx, cancel := withTimeout(r.Context(), s.cfg.WriteTimeout)
	defer cancel()
	status, body, replayed, err := s.write(ctx, tenant, key, hash, do)
	switch {
	case errors.Is(err, errIdempotencyMismatch):
		writeError(w, http.StatusUnprocessableEntity, "idempotency_key_reused", "this Idempotency-Key was already used with a different request")
		return
	case isDataException(err):
		// Postgres refused the values themselves: retrying cannot help.
		writeError(w, http.StatusBadRequest, "bad_request", "the catalog refused a value of this request: "+err.Error())
		return
	case err != nil:
		s.log.Warn("write failed", "tenant", tenant, "err", err)
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "unavailable", "the catalog is unavailable; retry with the same Idempotency-Key")
		return
	}
	// This process's readers see the write at once, not after a memo ends.
	s.rd.Forget(tenant, id)
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.Header().Set("Content-Type", contentType(status))
	w.Header().Set("Content-Length", strconv.Itoa(len(body)+1))
	setItemETag(w, status, body)
	w.WriteHeader(status)
	w.Write(append(body, '\n'))
}

func (s *Server) write(ctx context.Context, tenant, key string, hash []byte,
	do func(context.Context, pgx.Tx) (writeOutcome, error)) (status int, body []byte, replayed bool, err error) {
	if key != "" {
		if status, body, ok, err := s.storedResult(ctx, tenant, key, hash); err != nil || ok {
			return status, body, ok, err
		}
	}
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return 0, nil, false, fmt.Errorf("api: write: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	o, err := do(ctx, tx)
	if err != nil {
		return 0, nil, false, fmt.Errorf("api: write: %w", err)
	}
	body, err = json.Marshal(asProblem(o.status, o.body))
	if err != nil {
		return 0, nil, false, fmt.Errorf("api: write: encode: %w", err)
	}
	if key != "" {
		tag, err := tx.Exec(ctx, `INSERT INTO tidemark.requests (tenant_id, request_id, body_sha256, status, response)
			VALUES ($1, $2, $3, $4, $5) ON CONFLICT (tenant_id, request_id) DO NOTHING`, tenant, key, hash, o.status, body)
		if err != nil {
			return 0, nil, false, fmt.Errorf("api: write: store result: %w", err)
		}
		if tag.RowsAffected() == 0 {
			// A concurrent request with the same key committed first: undo
			// ours and answer with its result.
			tx.Rollback(ctx)
			status, body, ok, err := s.storedResult(ctx, tenant, key, hash)
			if err == nil && !ok {
				err = errors.New("api: write: stored result vanished")
			}
			return status, body, ok, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, nil, false, fmt.Errorf("api: write: commit: %w", err)
	}
	return o.status, body, false, nil
}

// storedResult returns the answer stored under (tenant, key), if any.
func (s *Server) storedResult(ctx context.Context, tenant, key string, hash []byte) (int, []byte, bool, error) {
	var (
		stored []byte
		status int
		body   []byte
	)
	err := s.pool.QueryRow(ctx, `SELECT body_sha256, status, response::text FROM tidemark.requests WHERE tenant_id = $1 AND request_id = $2`,
		tenant, key).Scan(&stored, &status, &body)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, nil, false, nil
	case err != nil:
		return 0, nil, false, fmt.Errorf("api: write: read stored result: %w", err)
	case !bytes.Equal(stored, hash):
		return 0, nil, false, errIdempotencyMismatch
	}
	return status, body, true, nil
}

// isDataException reports a Postgres data exception (SQLSTATE class 22: a
// value the column or jsonb cannot hold), which is the request's fault.
func isDataException(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && strings.HasPrefix(pe.Code, "22")
}
