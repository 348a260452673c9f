"""PostgreSQL URLs in messages: the password never shown, a malformed URL told
in one line (a StoreError, which the command prints and exits 2 on) rather than
a traceback from the driver's parser."""

from __future__ import annotations

import pytest

from syncserver import StoreError
from syncserver._pgstore import PostgresStore
from syncserver.store import password_of, redact, scrub


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://u:s3cret@db:5432/log", "postgresql://u:***@db:5432/log"),
        ("postgres://u:s3cret@[::1]:5432/log", "postgres://u:***@[::1]:5432/log"),
        # Malformed: urlsplit raises on these; redact must not.
        ("postgresql://x:s3cret@[::1", "postgresql://x:***@[::1"),
        ("postgresql://u:s3cret@127.0.0.1:notaport/db", "postgresql://u:***@127.0.0.1:notaport/db"),
        ("postgresql://u:s3cret@h1:1,h2:2/db", "postgresql://u:***@h1:1,h2:2/db"),
        # Characters that end the credentials, unencoded: the password is hidden whole.
        ("postgresql://u:s3/cr#et@h/db", "postgresql://u:***@h/db"),
        ("postgresql://u:s3?cr:et@h/db?sslmode=require", "postgresql://u:***@h/db?sslmode=require"),
        ("postgresql://u:a:b@h/db", "postgresql://u:***@h/db"),
        # libpq also reads a password from the query.
        (
            "postgresql://u@h/db?sslmode=require&password=s3cret",
            "postgresql://u@h/db?sslmode=require&password=***",
        ),
        # Nothing to hide; a path is not a URL.
        ("postgresql://u@h/db?application_name=a@b", "postgresql://u@h/db?application_name=a@b"),
        ("postgresql:///db", "postgresql:///db"),
        ("/var/lib/strabo/log:s3cret@x.db", "/var/lib/strabo/log:s3cret@x.db"),
    ],
)
def test_redact_hides_the_password_of_any_url(url: str, shown: str) -> None:
    assert redact(url) == shown


def test_scrub_hides_the_password_in_a_message_but_not_inside_words() -> None:
    url = "postgresql://u:p%2Fw@h/db?password=q"
    assert password_of(url) == "p%2Fw" and password_of("postgresql://u@h/db") is None
    assert scrub("for p/w and p%2Fw and q; pw port quick", url) == (
        "for *** and *** and ***; pw port quick"
    )
    assert scrub("a path: s3cret", "/srv/s3cret.db") == "a path: s3cret"


@pytest.mark.parametrize(
    ("url", "fault"),
    [
        ("postgresql://x:s3cret@[::1", "Invalid IPv6 URL"),
        ("postgresql://u:s3cret@127.0.0.1:notaport/db", "invalid literal for int()"),
        ("postgresql://u:s3cret@127.0.0.1:99999/db", "port must be 0-65535"),
        # The parser would quote "se", a piece of the password: advice instead.
        ("postgresql://u:se/cret@127.0.0.1:5432/db", "percent-encode the password's /"),
    ],
)
async def test_a_malformed_url_is_a_store_error(url: str, fault: str) -> None:
    store = PostgresStore(url)
    with pytest.raises(StoreError) as raised:
        await store.open()
    message = str(raised.value)
    assert message.startswith(redact(url) + ": not a valid PostgreSQL URL: "), message
    assert fault in message and "s3cret" not in message and "'se'" not in message, message
    assert "\n" not in message
    await store.close()
