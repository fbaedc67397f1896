"""The fake onert profile as its own module (the profile registry maps one module to one profile)."""
from tests.report.fake_profiles import FakeOnert

PROFILE = FakeOnert()
