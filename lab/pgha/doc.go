// Package pgha holds the end-to-end tests of tidemark against the Postgres
// topologies a production catalog runs on: a synchronous standby that stalls
// commits, and a physical standby promoted under load. capture, apply and
// serve run as real processes of the binary on real Postgres, Redis and
// Kafka; readers read through serve, and every answer is judged by the chaos
// checker against the source's history, the source reads by Postgres's own
// count (pg_stat_statements) against the source budget.
package pgha
