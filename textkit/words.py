"""Words textkit gives people (the formats' names), marked for the admin's translations without
textkit depending on Django: `gettext_noop` only marks a string for extraction (the name
`makemessages` and devtools.catalogue look for); the admin translates it where it shows it
(`console.formats`)."""


def gettext_noop(message: str) -> str:
    return message
