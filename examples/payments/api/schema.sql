-- The payments example's business tables. Count them to check the demo:
--   payments: one row per payment intent (status pending, succeeded or declined)
--   refunds:  one row per refund
--   orders:   one row per (account, order id)
--   outbox:   one receipt email per succeeded payment; delivered_at set once relayed
--   card_events: one row per card network event applied (POST /webhooks/cardnet)
-- Every table is keyed by account first, the way Citus users lay out a
-- multi-tenant service: on Citus they are distributed by account and
-- co-located (cmd/citus), so that a request's rows, and its idempotency
-- record (placed by the account: api.yaml's placement), share one shard,
-- and each statement names the account. On one PostgreSQL the layout costs
-- nothing.
CREATE TABLE IF NOT EXISTS payments (
    account     text        NOT NULL,
    id          bigserial,
    amount      bigint      NOT NULL CHECK (amount > 0),
    currency    text        NOT NULL,
    customer    text        NOT NULL,
    status      text        NOT NULL CHECK (status IN ('pending', 'succeeded', 'declined')),
    charge_id   text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    settled_at  timestamptz, -- set by the card network's charge.succeeded event
    PRIMARY KEY (account, id)
);
CREATE INDEX IF NOT EXISTS payments_charge_id ON payments (account, charge_id);
CREATE TABLE IF NOT EXISTS refunds (
    account     text        NOT NULL,
    id          bigserial,
    payment_id  bigint      NOT NULL,
    amount      bigint      NOT NULL CHECK (amount > 0),
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (account, id),
    FOREIGN KEY (account, payment_id) REFERENCES payments (account, id)
);
CREATE TABLE IF NOT EXISTS orders (
    account     text        NOT NULL,
    id          text        NOT NULL,
    item        text        NOT NULL,
    quantity    integer     NOT NULL,
    ship_to     text        NOT NULL DEFAULT '', -- PUT /orders/{id}/shipping
    version     bigint      NOT NULL DEFAULT 1,  -- the ETag; every write increments it (runtime/idemcond)
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (account, id)
);
CREATE TABLE IF NOT EXISTS outbox (
    account      text        NOT NULL,
    id           bigserial,
    payment_id   bigint      NOT NULL,
    recipient    text        NOT NULL,
    subject      text        NOT NULL,
    body         text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    delivered_at timestamptz,
    PRIMARY KEY (account, id),
    UNIQUE (account, payment_id),
    FOREIGN KEY (account, payment_id) REFERENCES payments (account, id)
);
-- No UNIQUE on event_id, on purpose: the idempotency key (the event id,
-- scoped to the verified sender) is what applies an event once, and the chaos
-- harness counts these rows to prove it. A production schema would add the
-- constraint as a second guard.
CREATE TABLE IF NOT EXISTS card_events (
    account      text        NOT NULL,
    seq          bigserial,
    event_id     text        NOT NULL,
    type         text        NOT NULL CHECK (type IN ('charge.succeeded', 'charge.refunded')),
    charge_id    text        NOT NULL,
    payment_id   bigint      NOT NULL,
    amount       bigint      NOT NULL,
    applied_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (account, seq),
    FOREIGN KEY (account, payment_id) REFERENCES payments (account, id)
);
