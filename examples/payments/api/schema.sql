-- The payments example's business tables. Count them to check the demo:
--   payments: one row per payment intent (status pending, succeeded or declined)
--   refunds:  one row per refund
--   orders:   one row per (account, order id)
--   outbox:   one receipt email per succeeded payment; delivered_at set once relayed
CREATE TABLE IF NOT EXISTS payments (
    id          bigserial   PRIMARY KEY,
    account     text        NOT NULL,
    amount      bigint      NOT NULL CHECK (amount > 0),
    currency    text        NOT NULL,
    customer    text        NOT NULL,
    status      text        NOT NULL CHECK (status IN ('pending', 'succeeded', 'declined')),
    charge_id   text,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS refunds (
    id          bigserial   PRIMARY KEY,
    payment_id  bigint      NOT NULL REFERENCES payments (id),
    amount      bigint      NOT NULL CHECK (amount > 0),
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS orders (
    account     text        NOT NULL,
    id          text        NOT NULL,
    item        text        NOT NULL,
    quantity    integer     NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (account, id)
);
CREATE TABLE IF NOT EXISTS outbox (
    id           bigserial   PRIMARY KEY,
    payment_id   bigint      NOT NULL UNIQUE REFERENCES payments (id),
    recipient    text        NOT NULL,
    subject      text        NOT NULL,
    body         text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    delivered_at timestamptz
);
