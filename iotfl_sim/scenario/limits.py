"""Upper bounds on the counts and physical quantities a scenario may ask for.

Far above any run this simulator can finish, they are there so that a typo (``rounds: 1e30``, a
batch size with six extra zeros) is an error naming the bound instead of a run that never ends or
an allocation that takes the machine down. NaN and infinities are refused in every number by
``profile.Strict`` itself.
"""

MAX_ROUNDS = 1_000_000
MAX_DEVICES = 100_000_000  # devices in a fleet (and in one group); the 10M-device benchmark fits
MAX_EPOCHS = 10_000  # local, pretraining or fine-tuning epochs
MAX_BATCH = 1_000_000  # any batch size
MAX_SAMPLES = 1_000_000_000  # sample counts (subsets, calibration, server samples)
MAX_STEPS = 10_000_000  # server optimisation steps
MAX_WORKERS = 4_096  # executor processes, actors or threads
MAX_BYTES = 1 << 40  # byte counts (message headers)
MAX_BUCKET = 1 << 31  # QSGD bucket size
MAX_INDEX = 100_000  # layer, stage or class indexes, per-client label shards
MAX_SEED = (1 << 64) - 1
MAX_LR = 1e3  # a learning rate or a weight decay: PyTorch applies it in float32, which overflows near 3.4e38

# physical quantities: far beyond any device, and far enough from float overflow that unit conversions (MB to
# bytes, Mbit/s to bit/s) stay finite
MAX_MEMORY_MB = 1e9  # a petabyte
MAX_LINK_MBPS = 1e9  # a petabit per second (tests use 1e6 for links that take no time)
MIN_LINK_MBPS = 1e-6  # a bit per second (LoRaWAN's slowest rate is about 250)
MIN_FLOPS = 1.0  # a FLOP (or value) per second (an 8-bit microcontroller does about 10^6): seconds stay finite
MIN_MEM_BW_GBS = 1e-9  # a byte per second
MAX_POWER_W = 1e6  # a megawatt: a device's or a server's power (an 8-GPU server draws about 10^4)
MAX_ENERGY_J = 3.6e15  # a terawatt-hour of battery (an electric car holds about 2 x 10^8 J); mains is null
MAX_OVERHEAD_US = 1e9  # 1000 s of fixed cost per operator, or per measured step
MAX_JITTER_SIGMA = 10.0  # a lognormal factor's sigma: exp(10 z) stays finite for any draw; 1 is already wild
MAX_RTT_S = 3600.0  # an hour: a round trip longer than that is an outage, which availability models
