"""DNSSEC for the zone director serves: keys, their timeline, online signing and denial.

- ``keys``: one zone key (ECDSA P-256 or Ed25519; a CSK, KSK or ZSK) and its timings;
- ``key_directory``: the keys of a zone in a directory, one JSON file each (mode 0600);
- ``timeline``: which keys are published, sign, and go to the parent at a moment, and the
  RFC 7583 timings of a rollover;
- ``signer``: RRSIGs for the RRsets of a response, cached per validity window;
- ``denial``: compact denial of existence (RFC 9824) NSEC records.
"""
