CREATE SCHEMA examination;
CREATE TABLE examination.exams (
    id bigserial PRIMARY KEY,
    course_id bigint NOT NULL REFERENCES catalog.courses (id),
    student text NOT NULL,
    proctoring text,
    started_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE examination.outbox (id bigserial PRIMARY KEY, exam_id bigint NOT NULL, event text NOT NULL);
