"""The SQL of the PostgreSQL store (``syncserver._pgstore``): its schema, and
the function a turn calls, which holds the ledger for one statement."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: The bytes a notification's payload may hold (PostgreSQL's limit is 8000):
#: the rows a commit wrote ride along below it, signed (65 bytes more), the
#: seq alone above it.
NOTE_BYTES = 7900

SCHEMA_VERSION = "1"
SCHEMA = """
CREATE TABLE IF NOT EXISTS strabo_instances (
    mas TEXT NOT NULL,
    protocol TEXT NOT NULL,
    seq BIGINT NOT NULL,
    idx INTEGER NOT NULL,
    root TEXT NOT NULL,
    action TEXT NOT NULL,
    performer TEXT NOT NULL,
    bindings TEXT NOT NULL,
    attempt_id TEXT,
    PRIMARY KEY (mas, protocol, seq, idx)
);
CREATE INDEX IF NOT EXISTS strabo_instances_by_root ON strabo_instances (mas, protocol, root);
CREATE INDEX IF NOT EXISTS strabo_instances_by_attempt
    ON strabo_instances (mas, protocol, performer, attempt_id) WHERE attempt_id IS NOT NULL;
CREATE TABLE IF NOT EXISTS strabo_ledgers (
    mas TEXT NOT NULL,
    protocol TEXT NOT NULL,
    last_seq BIGINT NOT NULL,
    PRIMARY KEY (mas, protocol)
);
CREATE TABLE IF NOT EXISTS strabo_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS strabo_protocols (
    mas TEXT NOT NULL,
    protocol TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    meaning TEXT NOT NULL,
    PRIMARY KEY (mas, protocol)
);
"""
# Servers starting at once must not race on CREATE TABLE: a transaction-level
# advisory lock on this arbitrary constant serializes schema creation.
SCHEMA_LOCK = 0x5354_5241_424F
COLUMNS = "seq, idx, action, performer, bindings, attempt_id"
# A ledger's lock: the two-integer form of a transaction-level advisory lock,
# this class and :func:`_ledger_key`; held until the holder's transaction has
# ended (committed: visible to the next holder's reads).
TURN_LOCK = 0x5354_5254
# Take the ledger, read what the caller missed (one range scan), and unless a
# row of it touches one of p_roots or holds one of the attempt ids written (by
# the same performer: a clash), write p_count batches after the
# last one (p_rel: 1 for the first), move the counter and notify: with the
# rows written (p_note, their JSON, relative seqs) when they fit a
# notification, so that the other servers follow them without reading the log,
# signed with the log's secret (any role that connects may NOTIFY: what
# servers apply must come from a commit of this function). Returns the
# missed rows, then the last seq before the write (r_idx -1; -2: a clash). In
# PL/pgSQL each statement takes a new snapshot: the reads after the lock see
# the commit it waited for, which one plain statement would not.
FUNCTION = "strabo_append_2"
DEFINITION = f"""
CREATE OR REPLACE FUNCTION strabo_append_2(p_mas text, p_protocol text, p_after bigint,
    p_key integer, p_roots text[], p_count integer, p_rel integer[],
    p_idx integer[], p_root text[], p_action text[], p_performer text[], p_bindings text[],
    p_attempt text[], p_channel text, p_note text, p_secret text)
RETURNS TABLE (r_seq bigint, r_idx integer, r_action text, r_performer text,
               r_bindings text, r_attempt text, r_root text)
LANGUAGE plpgsql AS $body$
DECLARE
    v_last bigint;
    v_clash boolean := false;
    v_note text;
BEGIN
    PERFORM pg_advisory_xact_lock({TURN_LOCK}, p_key);
    SELECT l.last_seq INTO v_last FROM strabo_ledgers l
        WHERE l.mas = p_mas AND l.protocol = p_protocol;
    IF v_last IS NULL THEN  -- the ledger's first turn anywhere
        INSERT INTO strabo_ledgers VALUES (p_mas, p_protocol, 0);
        v_last := 0;
    END IF;
    FOR r_seq, r_idx, r_action, r_performer, r_bindings, r_attempt, r_root IN
        SELECT i.seq, i.idx, i.action, i.performer, i.bindings, i.attempt_id, i.root
        FROM strabo_instances i
        WHERE i.mas = p_mas AND i.protocol = p_protocol AND i.seq > p_after
            AND i.seq <= v_last
        ORDER BY i.seq, i.idx
    LOOP
        v_clash := v_clash OR r_root = ANY (p_roots) OR (r_attempt IS NOT NULL AND EXISTS (
            SELECT 1 FROM unnest(p_performer, p_attempt) AS u(pf, at)
            WHERE u.at = r_attempt AND u.pf = r_performer));
        RETURN NEXT;
    END LOOP;
    IF p_count > 0 AND NOT v_clash THEN
        UPDATE strabo_ledgers SET last_seq = v_last + p_count
            WHERE mas = p_mas AND protocol = p_protocol;
        INSERT INTO strabo_instances (mas, protocol, seq, idx, root, action, performer,
                                      bindings, attempt_id)
            SELECT p_mas, p_protocol, v_last + u.r, u.i, u.root, u.action, u.performer,
                   u.bindings, u.attempt
            FROM unnest(p_rel, p_idx, p_root, p_action, p_performer, p_bindings, p_attempt)
                AS u(r, i, root, action, performer, bindings, attempt);
        v_note := json_build_array(p_mas, p_protocol, v_last + p_count)::text;
        IF p_note IS NOT NULL AND octet_length(v_note) + octet_length(p_note) < {NOTE_BYTES} THEN
            v_note := left(v_note, -1) || ', ' || v_last || ', ' || p_note || ']';
            v_note := encode(sha256(convert_to(p_secret || v_note, 'UTF8')), 'hex')
                || ' ' || v_note;
        END IF;
        PERFORM pg_notify(p_channel, v_note);
    END IF;
    r_seq := v_last;
    r_idx := CASE WHEN v_clash THEN -2 ELSE -1 END;
    r_action := NULL; r_performer := NULL; r_bindings := NULL; r_attempt := NULL; r_root := NULL;
    RETURN NEXT;
END
$body$"""
APPEND = f"SELECT * FROM strabo_append_2({', '.join(f'${i}' for i in range(1, 17))})"
Rows = Sequence[tuple[int, int, str, str, str, str, str | None]]
RECORD = "INSERT INTO strabo_protocols VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING"


async def define_functions(conn: Any) -> None:
    """Create the function turns call, or bring it to this version's text,
    unless it is there as it should be (a server that did not create it may
    not own it, and replacing it makes every session compile it again)."""
    source = await conn.fetchval(
        "SELECT prosrc FROM pg_proc WHERE proname = $1 "
        "AND pronamespace = to_regnamespace(current_schema())",
        FUNCTION,
    )
    if source != DEFINITION.split("$body$")[1]:
        await conn.execute(DEFINITION)
