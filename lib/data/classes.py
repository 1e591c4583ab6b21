"""The published class names of the datasets, shared by their readers and sample writers.

Readers (`lib.data.cifar`, `lib.data.events`) import their sample writers
(`lib.data.cifar_sample`, `lib.data.events_sample`); the writers import only this module and
never a reader, so the imports go one way.
"""

from __future__ import annotations

# The official class names (the meta files list each set in alphabetical order; label i is
# the i-th name).
CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse",
                   "ship", "truck")
CIFAR100_SUPERCLASSES = {
    "aquatic_mammals": ("beaver", "dolphin", "otter", "seal", "whale"),
    "fish": ("aquarium_fish", "flatfish", "ray", "shark", "trout"),
    "flowers": ("orchid", "poppy", "rose", "sunflower", "tulip"),
    "food_containers": ("bottle", "bowl", "can", "cup", "plate"),
    "fruit_and_vegetables": ("apple", "mushroom", "orange", "pear", "sweet_pepper"),
    "household_electrical_devices": ("clock", "keyboard", "lamp", "telephone", "television"),
    "household_furniture": ("bed", "chair", "couch", "table", "wardrobe"),
    "insects": ("bee", "beetle", "butterfly", "caterpillar", "cockroach"),
    "large_carnivores": ("bear", "leopard", "lion", "tiger", "wolf"),
    "large_man-made_outdoor_things": ("bridge", "castle", "house", "road", "skyscraper"),
    "large_natural_outdoor_scenes": ("cloud", "forest", "mountain", "plain", "sea"),
    "large_omnivores_and_herbivores": ("camel", "cattle", "chimpanzee", "elephant", "kangaroo"),
    "medium_mammals": ("fox", "porcupine", "possum", "raccoon", "skunk"),
    "non-insect_invertebrates": ("crab", "lobster", "snail", "spider", "worm"),
    "people": ("baby", "boy", "girl", "man", "woman"),
    "reptiles": ("crocodile", "dinosaur", "lizard", "snake", "turtle"),
    "small_mammals": ("hamster", "mouse", "rabbit", "shrew", "squirrel"),
    "trees": ("maple_tree", "oak_tree", "palm_tree", "pine_tree", "willow_tree"),
    "vehicles_1": ("bicycle", "bus", "motorcycle", "pickup_truck", "train"),
    "vehicles_2": ("lawn_mower", "rocket", "streetcar", "tank", "tractor"),
}
# The official meta lists both name sets in alphabetical order; label i is the i-th name.
CIFAR100_CLASSES = tuple(sorted(c for group in CIFAR100_SUPERCLASSES.values() for c in group))
CIFAR100_COARSE = tuple(sorted(CIFAR100_SUPERCLASSES))

# CIFAR10-DVS: CIFAR-10's classes; DVS Gesture's recordings name their lighting.
CIFAR10DVS_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse",
                      "ship", "truck")
DVSGESTURE_LIGHTING = ("fluorescent", "led", "natural")
